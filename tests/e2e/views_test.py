#!/usr/bin/python3
"""End-to-end test of the decoded views (bmp, npy, tensor) over a real mount.

Builds a tree of images in every encoding a dataset mixes (the e2e ImageFolder tree: JPEG
baseline/progressive, 4:2:0/4:4:4, gray; PNG gray, gray+alpha, RGB, RGBA, palette; Fashion-MNIST
when installed) plus the cases the views must refuse or survive (CMYK JPEG, 16-bit PNG, damaged
files, low bit depths, interlacing, transparency chunks, a PNG named .jpg, a text file named
.jpg), packs it twice (decoding on demand, and --predecode), mounts each store and checks:

  - every image: PIL's convert("RGB") of the bmp view file is the array of the original, pixel
    for pixel; np.load of the npy view file is that array too (H x W x 3 uint8, C order, wraps
    into torch without a copy); what the views cannot reproduce is served byte for byte as is;
  - every file of every view: the size stat reports is the number of bytes read;
  - the views are hidden from the root's listing and mirror the tree;
  - ImageFolder over the bmp view equals ImageFolder over the source (classes, sample order,
    targets, tensors); a mount with -o view=bmp shows the same at its root;
  - the tensor view: images.npy (read with mmap_mode="r", random batches) equals the stack of the
    per-image arrays in ImageFolder's order, labels.npy its targets, classes.txt and files.txt
    its classes and samples; absent (with `dsfs info` saying why) where sizes differ.

Usage: views_test.py --dsfs PATH [--keep]
Exit code 0 on success (or "views: SKIPPED" when it cannot mount here), 1 on any failure.
"""

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_imagefolder_test as e2e  # noqa: E402  (the tree builder and mount helpers)

TestFailure = e2e.TestFailure
run = e2e.run


def log(msg):
    print(f"views: {msg}", flush=True)


def build_specials(root):
    """Images the views must refuse (served as is) or get right in unusual encodings.

    Returns {relative path: expected} with expected "decoded" or "as-is"."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    os.makedirs(root)
    expect = {}

    def rgb(w, h):
        return Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8), "RGB")

    def save(name, img, fmt, how, **kw):
        img.save(os.path.join(root, name), format=fmt, **kw)
        expect[name] = how

    save("cmyk.jpg", rgb(20, 12).convert("CMYK"), "JPEG", "as-is", quality=90)
    save("gray16.png", Image.fromarray(rng.integers(0, 65535, size=(9, 11), dtype=np.uint16)
                                       .astype(np.int32), "I").convert("I;16"), "PNG", "as-is")
    save("bits1.png", rgb(13, 7).convert("1"), "PNG", "decoded")
    save("bits2.png", rgb(10, 10).convert("L").quantize(4), "PNG", "decoded", bits=2)
    save("bits4.png", rgb(10, 3).convert("P", palette=Image.ADAPTIVE, colors=16), "PNG",
         "decoded", bits=4)
    save("interlaced.png", rgb(33, 17), "PNG", "decoded", interlace=1)
    p = rgb(12, 12).convert("P", palette=Image.ADAPTIVE, colors=8)
    save("palette-trns.png", p, "PNG", "decoded", transparency=3)
    save("gray-trns.png", rgb(12, 5).convert("L"), "PNG", "decoded", transparency=17)
    save("rgb-trns.png", rgb(6, 6), "PNG", "decoded", transparency=(1, 2, 3))
    save("png-named.jpg", rgb(8, 8), "PNG", "decoded")
    save("big.jpg", rgb(640, 480).resize((640, 480)), "JPEG", "decoded", quality=75)
    save("gray-progressive.jpg", rgb(31, 17).convert("L"), "JPEG", "decoded", quality=90,
         progressive=True)
    save("422.jpg", rgb(35, 21), "JPEG", "decoded", quality=88, subsampling=1)
    # Damaged files: a truncated JPEG, a PNG with a broken CRC, garbage after a JPEG header.
    good = os.path.join(root, "big.jpg")
    with open(good, "rb") as f:
        data = f.read()
    with open(os.path.join(root, "truncated.jpg"), "wb") as f:
        f.write(data[: len(data) // 2])
    expect["truncated.jpg"] = "as-is"
    rgb(9, 9).save(os.path.join(root, "crc.png"))
    with open(os.path.join(root, "crc.png"), "r+b") as f:
        blob = bytearray(f.read())
        idat = blob.find(b"IDAT")
        blob[idat + 6] ^= 0xFF
        f.seek(0)
        f.write(blob)
    expect["crc.png"] = "as-is"
    with open(os.path.join(root, "garbage.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0" + bytes(rng.integers(0, 256, size=500, dtype=np.uint8)))
    expect["garbage.jpg"] = "as-is"
    with open(os.path.join(root, "text.jpg"), "w") as f:
        f.write("not an image at all\n")
    expect["text.jpg"] = "as-is"
    # PNGs libpng reads but PIL refuses or reads otherwise: indices past a short palette (PIL
    # shows a gray level, libpng black), a bad checksum on a text chunk, a text chunk that
    # inflates past PIL's 1 MiB limit. Served as they are.
    def chunk(kind, body, crc=None):
        crc = zlib.crc32(kind + body) if crc is None else crc
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc & 0xFFFFFFFF)

    def palette_png(extra=b"", entries=4):
        ihdr = struct.pack(">IIBBBBB", 4, 1, 8, 3, 0, 0, 0)
        plte = bytes([200, 10, 10, 10, 200, 10, 1, 2, 3, 4, 5, 6])[: 3 * entries]
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"PLTE", plte) + extra +
                chunk(b"IDAT", zlib.compress(b"\0\0\1\2\3")) + chunk(b"IEND", b""))

    for name, blob, how in [
            ("palette-4.png", palette_png(), "decoded"),
            ("palette-short.png", palette_png(entries=2), "as-is"),
            ("text-crc.png", palette_png(chunk(b"tEXt", b"k\0v", crc=0)), "as-is"),
            ("ztxt-small.png", palette_png(chunk(b"zTXt", b"k\0\0" + zlib.compress(b"hi"))),
             "decoded"),
            ("ztxt-big.png",
             palette_png(chunk(b"zTXt", b"k\0\0" + zlib.compress(b"a" * (2 << 20)))), "as-is")]:
        with open(os.path.join(root, name), "wb") as f:
            f.write(blob)
        expect[name] = how
    return expect


def build_uniform(root, count_per_class=25):
    """A tree of one image size (the tensor view's case): Fashion-MNIST if installed, else
    generated 28x28 images; nested folders included."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(11)
    if os.path.isdir(e2e.FASHION_MNIST_DIR):
        pixels, targets = e2e.read_fashion_mnist(200)
    else:
        pixels = rng.integers(0, 256, size=(200, 28, 28), dtype=np.uint8)
        targets = rng.integers(0, 10, size=200)
    for i, (px, t) in enumerate(zip(pixels, targets)):
        cdir = os.path.join(root, f"class-{t}")
        if i % 7 == 0:
            cdir = os.path.join(cdir, "deeper")
        os.makedirs(cdir, exist_ok=True)
        Image.fromarray(px, "L").save(os.path.join(cdir, f"img_{i:04d}.png"))
    with open(os.path.join(root, "class-0", "notes.txt"), "w") as f:
        f.write("not an image\n")
    # A JPEG of the same size: the tensor view mixes formats as long as the size is one.
    e2e.synthetic_image(rng, 28, 28, "RGB").save(os.path.join(root, "class-1", "photo.jpg"),
                                                 quality=90)
    # Names that are not UTF-8 sort as Python sorts them ("\udcff" between "é" and emoji),
    # not as their bytes.
    for i, name in enumerate([b"\xc3\xa9.png", b"\xff.png", b"\xf0\x9f\x98\x80.png"]):
        Image.fromarray(pixels[i], "L").save(os.path.join(os.fsencode(root), b"class-2", name),
                                             format="PNG")


def build_absent(root):
    """Trees the tensor view cannot serve: a class reached through a symbolic link (ImageFolder
    follows it), and images of two sizes."""
    import numpy as np
    from PIL import Image

    def save(rel, size):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        Image.fromarray(np.zeros((size, size), np.uint8), "L").save(os.path.join(root, rel))

    save("links/real/0.png", 28)
    os.symlink("real", os.path.join(root, "links", "alias"))
    save("mixed/a/0.png", 28)
    save("mixed/a/1.png", 14)


def pil_array(path):
    import numpy as np
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def check_images(src, mnt, specials):
    """Pixel equality over every file of the tree; returns (decoded, as_is, others) counts."""
    import numpy as np
    import torch

    bmp_root = os.path.join(mnt, ".dsfs", "bmp")
    npy_root = os.path.join(mnt, ".dsfs", "npy")
    decoded = as_is = others = 0
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        for name in filenames:
            s = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if os.path.islink(s):
                continue
            with open(s, "rb") as f:
                original = f.read()
            b = os.path.join(bmp_root, rel)
            with open(b, "rb") as f:
                bmp = f.read()
            if os.stat(b).st_size != len(bmp):
                raise TestFailure(f"bmp/{rel}: stat says {os.stat(b).st_size} bytes, read {len(bmp)}")
            is_image = original[:3] == b"\xff\xd8\xff" or original[:8] == b"\x89PNG\r\n\x1a\n"
            want = specials.get(rel) or ("decoded" if is_image else "as-is")
            npy_path = os.path.join(npy_root, rel + ".npy")
            if want == "as-is":
                if bmp != original:
                    raise TestFailure(f"bmp/{rel}: not served as it is ({len(bmp)} bytes, "
                                      f"original {len(original)})")
                if os.path.exists(npy_path):
                    raise TestFailure(f"npy/{rel}.npy exists for a file served as is")
                with open(os.path.join(npy_root, rel), "rb") as f:
                    if f.read() != original:
                        raise TestFailure(f"npy/{rel}: not served as it is")
                if is_image:
                    as_is += 1
                else:
                    others += 1
                continue
            if bmp[:2] != b"BM":
                raise TestFailure(f"bmp/{rel}: not a BMP (starts {bmp[:8]!r})")
            want_px = pil_array(s)
            got_px = pil_array(b)
            if want_px.shape != got_px.shape or not np.array_equal(want_px, got_px):
                diff = (np.abs(want_px.astype(int) - got_px.astype(int)).max()
                        if want_px.shape == got_px.shape else "shape")
                raise TestFailure(f"bmp/{rel}: pixels differ from the original's "
                                  f"({want_px.shape} vs {got_px.shape}, max diff {diff})")
            if os.path.exists(os.path.join(npy_root, rel)):
                raise TestFailure(f"npy/{rel}: the image is listed under its own name too")
            with open(npy_path, "rb") as f:
                raw = f.read()
            if os.stat(npy_path).st_size != len(raw):
                raise TestFailure(f"npy/{rel}.npy: stat size differs from bytes read")
            arr = np.load(npy_path)
            if arr.dtype != np.uint8 or arr.shape != want_px.shape or not arr.flags.c_contiguous:
                raise TestFailure(f"npy/{rel}.npy: {arr.dtype} {arr.shape}, want uint8 "
                                  f"{want_px.shape} C order")
            if not np.array_equal(arr, want_px):
                raise TestFailure(f"npy/{rel}.npy: pixels differ from the original's")
            t = torch.from_numpy(arr)
            if t.data_ptr() != arr.ctypes.data:
                raise TestFailure(f"npy/{rel}.npy: torch.from_numpy copied")
            decoded += 1
    return decoded, as_is, others


RESIZED = (16, 37)  # the resized views checked: bmp-N and jpeg-N for each N


def resized_expected(path, n):
    """What Resize(n) makes of the original's RGB pixels, or None when the view shows it as in
    bmp (its shorter side is at most n: Resize(n) of the view file then upscales the same
    pixels the original would give)."""
    from PIL import Image
    from torchvision import transforms

    with Image.open(path) as im:
        rgb = im.convert("RGB")
    if min(rgb.size) <= n:
        return None
    return transforms.Resize(n)(rgb)


def check_resized(src, mnt, specials):
    """bmp-N: PIL's Resize(N) of the original, pixel for pixel; jpeg-N: a JPEG whose pixels are
    those of PIL's own save(quality=90) of that image; an image at or below N: the bmp view's
    file; the rest as is. Returns (resized, as in bmp, as is) counts."""
    import io

    import numpy as np
    from PIL import Image

    resized = as_bmp = as_is = 0
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        for name in filenames:
            s = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if os.path.islink(s):
                continue
            with open(s, "rb") as f:
                original = f.read()
            is_image = original[:3] == b"\xff\xd8\xff" or original[:8] == b"\x89PNG\r\n\x1a\n"
            want = specials.get(rel) or ("decoded" if is_image else "as-is")
            for n in RESIZED:
                want_img = resized_expected(s, n) if want == "decoded" else None
                for fmt in ("bmp", "jpeg"):
                    p = os.path.join(mnt, ".dsfs", f"{fmt}-{n}", rel)
                    with open(p, "rb") as f:
                        got = f.read()
                    if os.stat(p).st_size != len(got):
                        raise TestFailure(f"{fmt}-{n}/{rel}: stat says {os.stat(p).st_size} "
                                          f"bytes, read {len(got)}")
                    if want == "as-is":
                        if got != original:
                            raise TestFailure(f"{fmt}-{n}/{rel}: not served as it is")
                        as_is += 1
                        continue
                    if want_img is None:
                        with open(os.path.join(mnt, ".dsfs", "bmp", rel), "rb") as f:
                            if got != f.read():
                                raise TestFailure(f"{fmt}-{n}/{rel}: not the bmp view's file")
                        as_bmp += 1
                        continue
                    want_px = np.asarray(want_img)
                    if fmt == "jpeg":
                        if got[:3] != b"\xff\xd8\xff":
                            raise TestFailure(f"jpeg-{n}/{rel}: not a JPEG")
                        buf = io.BytesIO()
                        want_img.save(buf, "JPEG", quality=90)
                        buf.seek(0)
                        want_px = np.asarray(Image.open(buf).convert("RGB"))
                    elif got[:2] != b"BM":
                        raise TestFailure(f"bmp-{n}/{rel}: not a BMP")
                    got_px = np.asarray(Image.open(io.BytesIO(got)).convert("RGB"))
                    if want_px.shape != got_px.shape or not np.array_equal(want_px, got_px):
                        diff = (np.abs(want_px.astype(int) - got_px.astype(int)).max()
                                if want_px.shape == got_px.shape else "shape")
                        raise TestFailure(f"{fmt}-{n}/{rel}: pixels differ from PIL's "
                                          f"({want_px.shape} vs {got_px.shape}, max diff {diff})")
                    resized += 1
    return resized, as_bmp, as_is


def compare_imagefolder_resized(src, root, n):
    """ImageFolder with Resize(n) over `root` (a resized view) equals it over the source."""
    import torch
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.Resize(n), transforms.ToTensor()])
    a = datasets.ImageFolder(src, transform=tf)
    b = datasets.ImageFolder(root, transform=tf)
    if [os.path.relpath(p, src) for p, _ in a.samples] != \
            [os.path.relpath(p, root) for p, _ in b.samples]:
        raise TestFailure(f"Resize({n}): samples differ")
    for i in range(len(a)):
        (xa, ta), (xb, tb) = a[i], b[i]
        if ta != tb or xa.shape != xb.shape or not torch.equal(xa, xb):
            raise TestFailure(f"Resize({n}): {a.samples[i][0]}: tensors differ")
    return len(a)


def fstype(mnt):
    r = run(["findmnt", "-n", "-o", "FSTYPE", "--mountpoint", mnt])
    return r.stdout.strip()


def kernel_mount_possible():
    if os.geteuid() != 0:
        return False
    with open("/proc/filesystems") as f:
        if "erofs" in f.read():
            return True
    return run(["modprobe", "-q", "erofs"]).returncode == 0


def check_listing(src, mnt):
    if ".dsfs" in os.listdir(mnt):
        raise TestFailure("the root's listing shows .dsfs")
    if sorted(os.listdir(os.path.join(mnt, ".dsfs"))) != ["bmp", "npy", "stats", "tensor"]:
        raise TestFailure(f"/.dsfs lists {sorted(os.listdir(os.path.join(mnt, '.dsfs')))}")
    for view in ("bmp", "tensor"):
        for dirpath, dirnames, filenames in os.walk(src):
            rel = os.path.relpath(dirpath, src)
            want = sorted(dirnames + filenames)
            got = sorted(os.listdir(os.path.join(mnt, ".dsfs", view, rel)))
            if view == "tensor":
                got = [n for n in got if n not in ("images.npy", "labels.npy", "classes.txt",
                                                   "files.txt")]
            if want != got:
                raise TestFailure(f"{view}/{rel}: lists {got[:5]}..., the source {want[:5]}...")


def check_every_size(mnt):
    """stat size == bytes read for every regular file of every view."""
    n = 0
    for view in ("bmp", "npy", "tensor"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(mnt, ".dsfs", view)):
            for name in filenames:
                p = os.path.join(dirpath, name)
                if os.path.islink(p):
                    continue
                with open(p, "rb") as f:
                    got = len(f.read())
                if got != os.stat(p).st_size:
                    raise TestFailure(f"{p}: stat says {os.stat(p).st_size}, read {got}")
                n += 1
    return n


def compare_imagefolder(src, root):
    """ImageFolder over `root` (a view) equals ImageFolder over the source."""
    import torch
    from torchvision import datasets, transforms

    a = datasets.ImageFolder(src, transform=transforms.ToTensor())
    b = datasets.ImageFolder(root, transform=transforms.ToTensor())
    if a.classes != b.classes or a.class_to_idx != b.class_to_idx:
        raise TestFailure(f"classes differ: {a.classes[:4]} vs {b.classes[:4]}")
    rel_a = [(os.path.relpath(p, src), t) for p, t in a.samples]
    rel_b = [(os.path.relpath(p, root), t) for p, t in b.samples]
    if rel_a != rel_b:
        raise TestFailure(f"samples differ ({len(rel_a)} vs {len(rel_b)})")
    for i in range(len(a)):
        (xa, ta), (xb, tb) = a[i], b[i]
        if ta != tb or xa.shape != xb.shape or not torch.equal(xa, xb):
            raise TestFailure(f"{rel_a[i][0]}: ImageFolder tensors differ")
    return len(a)


def check_tensor(dsfs, store, src, mnt, rel):
    import numpy as np
    from torchvision import datasets

    ds = datasets.ImageFolder(os.path.join(src, rel))
    tdir = os.path.join(mnt, ".dsfs", "tensor", rel)
    images = np.load(os.path.join(tdir, "images.npy"), mmap_mode="r")
    labels = np.load(os.path.join(tdir, "labels.npy"))
    want = np.stack([pil_array(p) for p, _ in ds.samples])
    if images.shape != want.shape or images.dtype != np.uint8:
        raise TestFailure(f"tensor/{rel}/images.npy: {images.dtype} {images.shape}, "
                          f"want uint8 {want.shape}")
    if not np.array_equal(np.asarray(images), want):
        raise TestFailure(f"tensor/{rel}/images.npy differs from the per-image arrays")
    rng = np.random.default_rng(3)
    for _ in range(20):  # random batches straight from the map, as a loader would take them
        idx = np.sort(rng.choice(len(want), size=min(16, len(want)), replace=False))
        if not np.array_equal(images[idx], want[idx]):
            raise TestFailure(f"tensor/{rel}/images.npy: a random batch differs")
    if labels.dtype != np.int64 or labels.tolist() != ds.targets:
        raise TestFailure(f"tensor/{rel}/labels.npy differs from ImageFolder's targets")
    with open(os.path.join(tdir, "classes.txt"), errors="surrogateescape") as f:
        if f.read().splitlines() != ds.classes:
            raise TestFailure(f"tensor/{rel}/classes.txt differs from ImageFolder's classes")
    with open(os.path.join(tdir, "files.txt"), errors="surrogateescape") as f:
        files = f.read().splitlines()
    if files != [os.path.relpath(p, os.path.join(src, rel)) for p, _ in ds.samples]:
        raise TestFailure(f"tensor/{rel}/files.txt differs from ImageFolder's samples")
    r = run([dsfs, "info", store, rel])
    if r.returncode != 0 or f"{len(want)} images of 28x28" not in r.stdout:
        raise TestFailure(f"dsfs info {rel}: {r.stdout.strip()} {r.stderr.strip()}")
    return len(want)


def check_tensor_leaf(src, mnt, rel):
    """A directory without subdirectories is one class (its own name) of its own images."""
    import numpy as np

    names = sorted(n for n in os.listdir(os.path.join(src, rel)) if n.endswith(".png"))
    tdir = os.path.join(mnt, ".dsfs", "tensor", rel)
    images = np.load(os.path.join(tdir, "images.npy"), mmap_mode="r")
    want = np.stack([pil_array(os.path.join(src, rel, n)) for n in names])
    if not np.array_equal(np.asarray(images), want):
        raise TestFailure(f"tensor/{rel}/images.npy differs from its images")
    if np.load(os.path.join(tdir, "labels.npy")).tolist() != [0] * len(names):
        raise TestFailure(f"tensor/{rel}/labels.npy is not all class 0")
    with open(os.path.join(tdir, "classes.txt")) as f:
        if f.read() != os.path.basename(rel) + "\n":
            raise TestFailure(f"tensor/{rel}/classes.txt is not the directory's name")
    with open(os.path.join(tdir, "files.txt")) as f:
        if f.read().splitlines() != names:
            raise TestFailure(f"tensor/{rel}/files.txt lists other files")
    return len(names)


def check_tensor_absent(dsfs, store, mnt, rel, reason):
    tdir = os.path.join(mnt, ".dsfs", "tensor", rel)
    if "images.npy" in os.listdir(tdir) or os.path.exists(os.path.join(tdir, "images.npy")):
        raise TestFailure(f"tensor/{rel}: images.npy exists ({reason})")
    r = run([dsfs, "info", store, rel])
    if r.returncode != 0 or "absent:" not in r.stdout or reason not in r.stdout:
        raise TestFailure(f"dsfs info {rel} does not say why the tensor view is absent: "
                          f"{r.stdout.strip()} {r.stderr.strip()}")
    return r.stdout.strip().splitlines()[-1]


def mount(dsfs, store, mnt, *opts):
    r = run([dsfs, "mount", store, mnt, *opts], timeout=60)
    if r.returncode != 0:
        raise TestFailure(f"dsfs mount {' '.join(opts)} failed ({r.returncode}): {r.stderr.strip()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsfs", required=True)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    dsfs = os.path.abspath(args.dsfs)
    reason = e2e.cannot_mount_reason()
    if reason:
        log(f"SKIPPED: {reason}")
        return 0
    import torch

    torch.set_num_threads(1)
    start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="dsfs-views-")
    data, mnt = os.path.join(tmp, "data"), os.path.join(tmp, "mnt")
    os.makedirs(mnt)
    failure, report = None, []
    try:
        e2e.build_tree(os.path.join(data, "images"))
        specials = {os.path.join("specials", k): v
                    for k, v in build_specials(os.path.join(data, "specials")).items()}
        build_uniform(os.path.join(data, "uniform"))
        build_absent(os.path.join(data, "absent"))
        for predecode in (False, True):
            store = os.path.join(tmp, f"store{int(predecode)}.dsfs")
            r = run([dsfs, "pack", "-q", data, store] + (["--predecode"] if predecode else []))
            if r.returncode != 0:
                raise TestFailure(f"dsfs pack failed: {r.stderr.strip()}")
            label = "predecoded" if predecode else "decoded on demand"
            mount(dsfs, store, mnt)
            try:
                decoded, as_is, others = check_images(data, mnt, specials)
                check_listing(data, mnt)
                sizes = check_every_size(mnt)
                n = compare_imagefolder(os.path.join(data, "images"),
                                        os.path.join(mnt, ".dsfs", "bmp", "images"))
                resized, as_bmp, resized_as_is = check_resized(data, mnt, specials)
                n_resized = compare_imagefolder_resized(
                    os.path.join(data, "images"),
                    os.path.join(mnt, ".dsfs", f"bmp-{RESIZED[0]}", "images"), RESIZED[0])
                t = check_tensor(dsfs, store, data, mnt, "uniform")
                t_leaf = check_tensor(dsfs, store, data, mnt, "uniform/class-3")
                t_leaf += check_tensor_leaf(data, mnt, "uniform/class-3/deeper")
                why = check_tensor_absent(dsfs, store, mnt, "absent/mixed", "differ in size")
                check_tensor_absent(dsfs, store, mnt, "absent/links", "alias is a symbolic link")
                check_tensor_absent(dsfs, store, mnt, "images", "zz-cat-alias is a symbolic link")
            except Exception:
                e2e.unmount(dsfs, mnt)  # the first failure is the one to report
                raise
            err = e2e.unmount(dsfs, mnt)
            if err:
                raise TestFailure(err)
            report.append(f"{label}: {decoded} images pixel-identical in bmp and npy, {as_is} "
                          f"images and {others} other files served as they are, {sizes} view "
                          f"file sizes match, ImageFolder over bmp = source ({n} samples), "
                          f"tensor view {t} + {t_leaf} images exact; {why}; resized views "
                          f"(bmp-N, jpeg-N for N in {RESIZED}): {resized} files as PIL makes "
                          f"them, {as_bmp} as in bmp, {resized_as_is} as they are, ImageFolder "
                          f"with Resize({RESIZED[0]}) over bmp-{RESIZED[0]} = source "
                          f"({n_resized} samples)")
            # A view as the mount's root: the unmodified script's path stays the same.
            mount(dsfs, store, mnt, "-o", "view=bmp")
            try:
                listed = sorted(os.listdir(os.path.join(mnt, ".dsfs")))
                if ".dsfs" in os.listdir(mnt) or listed != ["npy", "original", "stats", "tensor"]:
                    raise TestFailure(f"view=bmp: .dsfs listed, or it holds {listed}")
                with open(os.path.join(mnt, ".dsfs", "original", "specials", "big.jpg"), "rb") as f:
                    if f.read(3) != b"\xff\xd8\xff":
                        raise TestFailure("view=bmp: .dsfs/original/specials/big.jpg is not the JPEG")
                compare_imagefolder(os.path.join(data, "images"), os.path.join(mnt, "images"))
                with open(os.path.join(mnt, "specials", "big.jpg"), "rb") as f:
                    if f.read(2) != b"BM":
                        raise TestFailure("view=bmp: big.jpg is not a BMP at the root")
            except Exception:
                e2e.unmount(dsfs, mnt)
                raise
            err = e2e.unmount(dsfs, mnt)
            if err:
                raise TestFailure(err)
            # A resized view as the root.
            n = RESIZED[1]
            mount(dsfs, store, mnt, "-o", f"view=bmp-{n}")
            try:
                listed = sorted(os.listdir(os.path.join(mnt, ".dsfs")))
                if listed != ["bmp", "npy", "original", "stats", "tensor"]:
                    raise TestFailure(f"view=bmp-{n}: .dsfs holds {listed}")
                compare_imagefolder_resized(os.path.join(data, "images"),
                                            os.path.join(mnt, "images"), n)
                if os.path.exists(os.path.join(mnt, ".dsfs", f"bmp-{n}")):
                    raise TestFailure(f"view=bmp-{n}: shown again inside itself")
            except Exception:
                e2e.unmount(dsfs, mnt)
                raise
            err = e2e.unmount(dsfs, mnt)
            if err:
                raise TestFailure(err)
        # -o kernel: bmp-N is an EROFS image like bmp; a jpeg-N file's size is known only once
        # encoded, so jpeg-N mounts with FUSE and says so in one line.
        store = os.path.join(tmp, "store0.dsfs")
        if kernel_mount_possible():
            n = RESIZED[0]
            mount(dsfs, store, mnt, "-o", f"kernel,view=bmp-{n}")
            try:
                if fstype(mnt) != "erofs":
                    raise TestFailure(f"kernel,view=bmp-{n}: mounted as {fstype(mnt)}")
                compare_imagefolder_resized(os.path.join(data, "images"),
                                            os.path.join(mnt, "images"), n)
            except Exception:
                e2e.unmount(dsfs, mnt)
                raise
            err = e2e.unmount(dsfs, mnt)
            if err:
                raise TestFailure(err)
            r = run([dsfs, "mount", store, mnt, "-o", f"kernel,view=jpeg-{n}"], timeout=60)
            try:
                if r.returncode != 0 or fstype(mnt) != "fuse.dsfs" or \
                        "mounting with FUSE" not in r.stderr or r.stderr.count("\n") != 1:
                    raise TestFailure(f"kernel,view=jpeg-{n}: rc {r.returncode}, "
                                      f"{fstype(mnt)}, {r.stderr.strip()}")
                if sorted(os.listdir(os.path.join(mnt, "images"))) != \
                        sorted(os.listdir(os.path.join(data, "images"))):
                    raise TestFailure(f"kernel,view=jpeg-{n}: the tree differs")
            finally:
                if e2e.is_mounted(mnt):
                    e2e.unmount(dsfs, mnt)
            report.append(f"-o kernel: view=bmp-{n} served by EROFS, view=jpeg-{n} by FUSE "
                          f"(one line says so), ImageFolder with Resize({n}) = source in both")
        else:
            report.append("-o kernel not checked: needs root and EROFS")
        for bad in ("view=png", "view=bmp-8", "view=jpeg-0256"):
            r = run([dsfs, "mount", os.path.join(tmp, "store0.dsfs"), mnt, "-o", bad])
            if r.returncode == 0 or "unknown view" not in r.stderr or r.stderr.count("\n") > 1:
                e2e.unmount(dsfs, mnt)
                raise TestFailure(f"{bad} was not refused in one line: {r.stderr.strip()}")
        r = run([dsfs, "mount", os.path.join(tmp, "store0.dsfs"), mnt, "-o", "view=png"])
        if r.returncode == 0 or "unknown view" not in r.stderr:
            e2e.unmount(dsfs, mnt)
            raise TestFailure(f"view=png was not refused clearly: {r.stderr.strip()}")
    except TestFailure as e:
        failure = str(e)
    except Exception as e:
        failure = f"{type(e).__name__}: {e}"
    finally:
        if e2e.is_mounted(mnt):
            e2e.unmount(dsfs, mnt)
        if not args.keep and not e2e.is_mounted(mnt):
            shutil.rmtree(tmp, ignore_errors=True)
    if failure:
        log(f"FAILED: {failure}")
        return 1
    for line in report:
        log(line)
    log(f"passed in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
