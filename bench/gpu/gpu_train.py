#!/usr/bin/python3
"""ResNet-18 training throughput on 32x32 images: the unmodified-script rate vs the GPU alone.

  python3 bench/gpu/gpu_train.py imagefolder ROOT [--workers 16] [--seconds 60]
  python3 bench/gpu/gpu_train.py ram ROOT          (the whole tree decoded once into one tensor)
  python3 bench/gpu/gpu_train.py gpu-only ROOT     (one batch on the GPU, trained on again and again)
      common: [--batch 512] [--device cuda] [--warmup 20] [--label TEXT]

imagefolder is what an unmodified training script does: ImageFolder(ROOT, transform=ToTensor()),
DataLoader(shuffle=True, num_workers=W, pin_memory=True), batches moved to the GPU. ram is the
target of issue 4 ("training from the whole dataset held in RAM as one tensor"): every image
decoded once (PIL, convert("RGB")) into an N x 3 x 32 x 32 uint8 tensor on the GPU, random
batches indexed there. gpu-only is the GPU's own rate. All train ResNet-18 (torchvision,
num_classes = the tree's classes) with bf16 autocast, channels_last and SGD; the rate counts
images over --seconds after --warmup steps. Prints one JSON line.
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
from torchvision.models import resnet18
from torchvision.transforms import ToTensor


def batches_imagefolder(root, a, device):
    ds = ImageFolder(root, transform=ToTensor())
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                        pin_memory=device.type == "cuda", drop_last=True,
                        persistent_workers=a.workers > 0)

    def gen():
        while True:
            for x, y in loader:
                yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    return len(ds.classes), gen()


def batches_ram(root, a, device):
    ds = ImageFolder(root)
    t0 = time.perf_counter()
    imgs = torch.empty((len(ds), 3, 32, 32), dtype=torch.uint8)
    labels = torch.tensor(ds.targets)
    for i, (path, _) in enumerate(ds.samples):
        img = ds.loader(path).resize((32, 32))
        imgs[i] = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(32, 32, 3).permute(2, 0, 1)
    print(json.dumps({"event": "decoded", "images": len(ds), "seconds": round(time.perf_counter() - t0, 1)}),
          file=sys.stderr, flush=True)
    imgs, labels = imgs.to(device), labels.to(device)

    def gen():
        while True:
            idx = torch.randint(0, len(ds), (a.batch,), device=device)
            yield imgs[idx].float().div_(255), labels[idx]
    return len(ds.classes), gen()


def batches_gpu_only(root, a, device):
    classes = len(ImageFolder(root).classes)
    x = torch.rand((a.batch, 3, 32, 32), device=device)
    y = torch.randint(0, classes, (a.batch,), device=device)

    def gen():
        while True:
            yield x, y
    return classes, gen()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["imagefolder", "ram", "gpu-only"])
    ap.add_argument("root")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    device = torch.device(a.device)
    make = {"imagefolder": batches_imagefolder, "ram": batches_ram, "gpu-only": batches_gpu_only}
    classes, batches = make[a.mode](a.root, a, device)
    model = resnet18(num_classes=classes).to(device).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    dtype = torch.bfloat16

    def step(x, y):
        x = x.to(memory_format=torch.channels_last)
        with torch.autocast(device_type=device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step(*next(batches))
    sync()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < a.seconds:
        loss = step(*next(batches))
        n += a.batch
    sync()
    el = time.perf_counter() - t0
    print(json.dumps({"mode": a.mode, "root": a.root, "label": a.label, "workers": a.workers,
                      "batch": a.batch, "device": str(device), "images": n,
                      "seconds": round(el, 2), "images_per_s": round(n / el, 1),
                      "loss": round(float(loss), 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
