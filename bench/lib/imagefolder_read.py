#!/usr/bin/python3
"""Reads an ImageFolder tree the way an unmodified torchvision training script does.

  /usr/bin/python3 bench/lib/imagefolder_read.py ROOT [--epochs 2] [--workers 2] [--batch 256]
                                                  [--samples N | --subset N] [--seed S] [--label TEXT]
                                                  [--resize N [--crop C]]

ImageFolder(ROOT, transform=ToTensor()) (with --resize: Compose([Resize(N), CenterCrop(C),
ToTensor()]), the usual evaluation transform of ImageNet-style trees) and DataLoader(shuffle=True, num_workers, batch_size),
nothing else: the default PIL loader, no persistent workers, no pinning. Prints JSON lines: one
for the directory scan (the ImageFolder constructor) and one per epoch with images/s, where an
epoch's time runs from creating the DataLoader iterator (worker start included, as in training)
to the last batch. --samples N draws only N random images per epoch (RandomSampler with
num_samples), to bound a run on a slow file system; shuffle=True is the same sampler with N = all.
--subset N fixes N random images (seeded) once and reads them in a new order each epoch
(SubsetRandomSampler), so that the second epoch reads exactly the files of the first: a bounded
run whose second epoch is a true hot epoch. The scan still covers the whole tree.
"""
import argparse
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, RandomSampler, SubsetRandomSampler
from torchvision.datasets import ImageFolder
from torchvision.transforms import CenterCrop, Compose, Resize, ToTensor


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--samples", type=int, default=0, help="images per epoch (default: all)")
    ap.add_argument("--subset", type=int, default=0,
                    help="the same N random images every epoch (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="")
    ap.add_argument("--resize", type=int, default=0, help="Resize(N) first (default: none)")
    ap.add_argument("--crop", type=int, default=0, help="then CenterCrop(C) (default: none)")
    a = ap.parse_args()
    steps = []
    if a.resize:
        steps.append(Resize(a.resize))
    if a.crop:
        steps.append(CenterCrop(a.crop))
    transform = Compose(steps + [ToTensor()]) if steps else ToTensor()

    torch.manual_seed(a.seed)
    extra = {"label": a.label} if a.label else {}

    t0 = time.perf_counter()
    ds = ImageFolder(a.root, transform=transform)
    scan = time.perf_counter() - t0
    print(json.dumps({"event": "scan", "root": a.root, **extra, "images": len(ds),
                      "classes": len(ds.classes), "scan_s": round(scan, 4)}), flush=True)

    if a.subset and a.subset < len(ds):
        g = torch.Generator().manual_seed(a.seed + 1)
        subset = torch.randperm(len(ds), generator=g)[: a.subset].tolist()
        loader = DataLoader(ds, batch_size=a.batch, sampler=SubsetRandomSampler(subset),
                            num_workers=a.workers)
    elif a.samples and a.samples < len(ds):
        sampler = RandomSampler(ds, num_samples=a.samples)
        loader = DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers)
    else:
        loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers)

    for epoch in range(1, a.epochs + 1):
        n = 0
        checksum = 0.0
        t0 = time.perf_counter()
        first = None
        for images, labels in loader:
            if first is None:
                first = time.perf_counter() - t0
            n += images.shape[0]
            checksum += float(labels.sum())
        el = time.perf_counter() - t0
        print(json.dumps({"event": "epoch", "root": a.root, **extra, "epoch": epoch,
                          "images": n, "elapsed_s": round(el, 3),
                          "images_per_s": round(n / el, 1) if el > 0 else None,
                          "first_batch_s": round(first or 0.0, 3),
                          "workers": a.workers, "batch": a.batch}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
