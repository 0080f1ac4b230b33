#!/usr/bin/python3
"""End-to-end test: torchvision's ImageFolder over a dsfs mount sees exactly the source tree.

Builds an ImageFolder tree of generated images (JPEG and PNG in several modes and sizes, plus
Fashion-MNIST images when Debian's dataset-fashion-mnist package is installed), packs it with
the dsfs binary, mounts the store, and checks that an unmodified
torchvision.datasets.ImageFolder(root, transform=ToTensor()) over the source and over the mount
gives the same classes, the same samples in the same order and identical tensors; then that a
DataLoader(num_workers=2, batch_size=64) over the mount yields the same batches as over the
source.

Usage: e2e_imagefolder_test.py --dsfs PATH [--keep]
Exit code 0 on success (or when it cannot run here: it then prints a line starting with
"e2e_imagefolder: SKIPPED"), 1 with a message on any mismatch or failure.
"""

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time

SYNTHETIC_CLASSES = ["airplane", "cat", "dog with space", "naïve_café", "ship-日本"]
IMAGES_PER_CLASS = 80
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_IMAGES = 300
FASHION_MNIST_LABELS = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
                        "sneaker", "bag", "ankle-boot"]
SIZES = [(16, 16), (28, 28), (32, 32), (17, 23), (31, 9), (1, 1), (64, 48), (5, 97), (33, 33)]
# (file suffix, PIL mode, save arguments): the encodings an image dataset mixes.
KINDS = [
    (".jpg", "RGB", {"quality": 90}),                                    # baseline, 4:2:0
    (".jpg", "RGB", {"quality": 85, "progressive": True, "optimize": True}),
    (".jpeg", "RGB", {"quality": 95, "subsampling": 0}),                 # 4:4:4
    (".jpg", "L", {"quality": 80}),                                      # grayscale
    (".png", "RGB", {}),
    (".png", "RGBA", {"optimize": True}),
    (".png", "L", {}),
    (".png", "P", {}),                                                   # palette
    (".png", "LA", {}),
    (".JPG", "RGB", {"quality": 70}),                                    # upper-case suffix
]


class TestFailure(Exception):
    pass


def log(msg):
    print(f"e2e_imagefolder: {msg}", flush=True)


def run(argv, timeout=300):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace", timeout=timeout)


def cannot_mount_reason():
    if os.geteuid() != 0:
        return "not running as root (mounting needs root)"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        return f"/dev/fuse is not usable: {e.strerror}"
    return ""


def unescape_mountinfo(path):
    # mountinfo writes space, tab, newline and backslash in paths as \ooo.
    out, i = bytearray(), 0
    raw = path.encode("utf-8", "surrogateescape")
    while i < len(raw):
        if raw[i:i + 1] == b"\\" and i + 3 < len(raw) and raw[i + 1:i + 4].isdigit():
            out.append(int(raw[i + 1:i + 4], 8))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def is_mounted(mountpoint):
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        return any(unescape_mountinfo(line.split()[4]) == mountpoint for line in f)


# ---------------------------------------------------------------------------------------------
# The source tree

def synthetic_image(rng, width, height, mode):
    """A "real-looking" picture: smooth gradients, a few filled shapes and sensor noise."""
    import numpy as np
    from PIL import Image, ImageDraw

    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    channels = []
    for _ in range(3):
        a, b, c = rng.uniform(-1, 1, size=3)
        phase = rng.uniform(0, 2 * np.pi)
        g = 128 + 90 * np.sin(a * x / max(width, 1) * 4 + b * y / max(height, 1) * 4 + phase)
        channels.append(g + c * 20)
    rgb = np.clip(np.stack(channels, axis=-1), 0, 255).astype(np.uint8)
    img = Image.fromarray(rgb, "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(1, 4))):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1, y1 = x0 + int(rng.integers(1, width + 1)), y0 + int(rng.integers(1, height + 1))
        color = tuple(int(v) for v in rng.integers(0, 256, size=3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=color)
    noisy = np.asarray(img).astype(np.int16) + rng.normal(0, 6, size=(height, width, 3))
    img = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB")
    if mode == "RGBA":
        alpha = np.linspace(40, 255, width * height).reshape(height, width).astype(np.uint8)
        img = img.convert("RGBA")
        img.putalpha(Image.fromarray(alpha, "L"))
    elif mode == "P":
        img = img.convert("P", palette=Image.ADAPTIVE, colors=int(rng.integers(4, 200)))
    elif mode != "RGB":
        img = img.convert(mode)
    return img


def read_fashion_mnist(count):
    """The first `count` test images and labels (28x28 grayscale) of Fashion-MNIST."""
    import numpy as np

    images = os.path.join(FASHION_MNIST_DIR, "t10k-images-idx3-ubyte.gz")
    labels = os.path.join(FASHION_MNIST_DIR, "t10k-labels-idx1-ubyte.gz")
    with gzip.open(images, "rb") as f:
        header = f.read(16)
        if int.from_bytes(header[0:4], "big") != 2051:
            raise TestFailure(f"{images}: not an idx3 image file")
        rows, cols = int.from_bytes(header[8:12], "big"), int.from_bytes(header[12:16], "big")
        pixels = np.frombuffer(f.read(count * rows * cols), dtype=np.uint8)
    with gzip.open(labels, "rb") as f:
        if int.from_bytes(f.read(8)[0:4], "big") != 2049:
            raise TestFailure(f"{labels}: not an idx1 label file")
        targets = np.frombuffer(f.read(count), dtype=np.uint8)
    return pixels.reshape(count, rows, cols), targets


def build_tree(root):
    """Writes the ImageFolder tree; returns (images written, notes)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(20240601)
    written, notes = 0, []
    os.makedirs(root)
    for ci, cls in enumerate(SYNTHETIC_CLASSES):
        cdir = os.path.join(root, cls)
        os.makedirs(cdir)
        for i in range(IMAGES_PER_CLASS):
            suffix, mode, save_args = KINDS[(i + ci) % len(KINDS)]
            w, h = SIZES[(i * 7 + ci) % len(SIZES)]
            img = synthetic_image(rng, w, h, mode)
            # Some images in a nested folder: ImageFolder walks each class recursively.
            sub = cdir if i % 9 else os.path.join(cdir, "nested dir")
            os.makedirs(sub, exist_ok=True)
            name = f"{cls}_{i:03d}_{mode}_{w}x{h}{suffix}"
            img.save(os.path.join(sub, name), format="PNG" if suffix == ".png" else "JPEG",
                     **save_args)
            written += 1
        # Files ImageFolder must skip on both sides, and a hidden image it must not.
        with open(os.path.join(cdir, "README.txt"), "w") as f:
            f.write(f"class {cls}\n")
        with open(os.path.join(cdir, "labels.csv"), "w") as f:
            f.write("name,label\n")
        synthetic_image(rng, 8, 8, "RGB").save(os.path.join(cdir, ".hidden.png"))
        written += 1
    # A symlinked image and a symlinked directory, followed by ImageFolder's os.walk.
    target = sorted(f for f in os.listdir(os.path.join(root, "airplane")) if f.endswith(".jpg"))[0]
    os.symlink(f"../airplane/{target}", os.path.join(root, "cat", "linked_airplane.jpg"))
    os.symlink("../ship-日本/nested dir", os.path.join(root, "dog with space", "linked dir"))
    # A symlink at the top is a class of its own (find_classes follows it).
    os.symlink("cat", os.path.join(root, "zz-cat-alias"))

    if os.path.isdir(FASHION_MNIST_DIR):
        pixels, targets = read_fashion_mnist(FASHION_MNIST_IMAGES)
        for i, (px, t) in enumerate(zip(pixels, targets)):
            cdir = os.path.join(root, f"fmnist-{t}-{FASHION_MNIST_LABELS[t]}")
            os.makedirs(cdir, exist_ok=True)
            Image.fromarray(px, "L").save(os.path.join(cdir, f"fmnist_{i:04d}.png"))
            written += 1
    else:
        notes.append(f"{FASHION_MNIST_DIR} not found: no Fashion-MNIST images")
    return written, notes


# ---------------------------------------------------------------------------------------------
# The comparisons

def compare_datasets(src, mnt):
    import torch
    from torchvision import datasets, transforms

    a = datasets.ImageFolder(src, transform=transforms.ToTensor())
    b = datasets.ImageFolder(mnt, transform=transforms.ToTensor())
    if a.classes != b.classes:
        raise TestFailure(f"classes differ:\n  source {a.classes}\n  mount  {b.classes}")
    if a.class_to_idx != b.class_to_idx:
        raise TestFailure(f"class_to_idx differs:\n  source {a.class_to_idx}\n"
                          f"  mount  {b.class_to_idx}")
    rel_a = [(os.path.relpath(p, src), t) for p, t in a.samples]
    rel_b = [(os.path.relpath(p, mnt), t) for p, t in b.samples]
    if rel_a != rel_b:
        for i, (x, y) in enumerate(zip(rel_a, rel_b)):
            if x != y:
                raise TestFailure(f"sample {i} differs: source {x!r}, mount {y!r}")
        raise TestFailure(f"{len(rel_a)} samples in the source, {len(rel_b)} on the mount")
    if a.targets != b.targets:
        raise TestFailure("targets differ")
    for i in range(len(a)):
        rel = rel_a[i][0]
        (xa, ta), (xb, tb) = a[i], b[i]
        if ta != tb or xa.dtype != xb.dtype or xa.shape != xb.shape or not torch.equal(xa, xb):
            raise TestFailure(f"{rel}: tensors differ (source {tuple(xa.shape)} target {ta}, "
                              f"mount {tuple(xb.shape)} target {tb})")
        # Equal tensors could hide a difference the decoder ignores (e.g. trailing bytes).
        with open(a.samples[i][0], "rb") as f:
            want_bytes = f.read()
        with open(b.samples[i][0], "rb") as f:
            got_bytes = f.read()
        if want_bytes != got_bytes:
            raise TestFailure(f"{rel}: file bytes differ ({len(want_bytes)} in the source, "
                              f"{len(got_bytes)} on the mount)")
    return len(a), len(a.classes)


def compare_loaders(src, mnt):
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    # Batching needs one size: the usual Resize first (deterministic on identical input).
    tf = transforms.Compose([transforms.Resize((32, 32)), transforms.ToTensor()])
    loaders = [DataLoader(datasets.ImageFolder(root, transform=tf), batch_size=64, shuffle=False,
                          num_workers=2)
               for root in (src, mnt)]
    batches = samples = 0
    it_a, it_b = iter(loaders[0]), iter(loaders[1])
    try:
        while True:
            a = next(it_a, None)
            b = next(it_b, None)
            if a is None and b is None:
                break
            if a is None or b is None:
                raise TestFailure(f"the {'source' if a is None else 'mount'} loader ended first, "
                                  f"after {batches} batches")
            (xa, ya), (xb, yb) = a, b
            if not torch.equal(ya, yb):
                raise TestFailure(f"batch {batches}: targets differ")
            if xa.shape != xb.shape or not torch.equal(xa, xb):
                raise TestFailure(f"batch {batches}: images differ")
            batches += 1
            samples += xa.shape[0]
    finally:
        # Ends the worker processes (and their open files) before the unmount.
        del it_a, it_b
    return batches, samples


# ---------------------------------------------------------------------------------------------

def unmount(dsfs, mountpoint):
    """Unmounts whatever is at mountpoint; returns an error message or ""."""
    if not is_mounted(mountpoint):
        return ""
    r = run([dsfs, "umount", mountpoint], timeout=60)
    if not is_mounted(mountpoint):
        return ""
    msg = f"dsfs umount failed ({r.returncode}: {r.stderr.strip()}); used umount -l"
    run(["umount", "-l", mountpoint], timeout=60)
    return msg


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsfs", required=True, help="path of the dsfs binary")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    dsfs = os.path.abspath(args.dsfs)

    reason = cannot_mount_reason()
    if reason:
        log(f"SKIPPED: {reason}")
        return 0
    if not os.access(dsfs, os.X_OK):
        log(f"FAILED: {dsfs} is not an executable")
        return 1
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        log(f"FAILED: {sys.executable} lacks a needed module: {e}")
        return 1
    torch.set_num_threads(1)

    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="dsfs-e2e-")
    src, store, mnt = (os.path.join(tmp, n) for n in ("images", "images.dsfs", "mnt"))
    failure = None
    try:
        written, notes = build_tree(src)
        for n in notes:
            log(f"note: {n}")
        os.makedirs(mnt)
        r = run([dsfs, "pack", "-q", src, store])
        if r.returncode != 0:
            raise TestFailure(f"dsfs pack failed ({r.returncode}): {r.stderr.strip()}")
        r = run([dsfs, "mount", store, mnt], timeout=60)
        if r.returncode != 0:
            raise TestFailure(f"dsfs mount failed ({r.returncode}): {r.stderr.strip()}")
        if not is_mounted(mnt):
            raise TestFailure(f"dsfs mount succeeded but {mnt} is not a mountpoint")
        n, classes = compare_datasets(src, mnt)
        if n < written:
            raise TestFailure(f"ImageFolder found {n} samples, {written} images were written")
        batches, loaded = compare_loaders(src, mnt)
        if loaded != n:
            raise TestFailure(f"the DataLoader yielded {loaded} samples, the dataset has {n}")
    except TestFailure as e:
        failure = str(e)
    except Exception as e:  # anything unexpected is a failure too, with its type
        failure = f"{type(e).__name__}: {e}"
    finally:
        umount_error = unmount(dsfs, mnt)
        if umount_error and not failure:
            failure = umount_error
        if is_mounted(mnt):
            failure = (failure or "") + f"; {mnt} is still mounted"
        elif not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if failure:
        log(f"FAILED: {failure}")
        return 1
    log(f"{n} samples identical ({classes} classes; {batches} DataLoader batches identical; "
        f"{time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
