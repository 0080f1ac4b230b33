#!/usr/bin/python3
"""The resized-views benchmark (issue 18): an unmodified Resize + CenterCrop script, side by side.

  /usr/bin/python3 bench/resize_bench.py [--dsfs BUILD/dsfs] [--work /var/tmp/dsfs-bench]
                                         [--dataset photos20k] [--size 256] [--crop 224]
                                         [--subset N] [--rounds 1] [--readers ...]

The tree is WORK/DATASET: photographs at ImageNet-like sizes (bench/lib/datasets.py photos: 300-800
px, JPEG q90). The script is bench/lib/imagefolder_read.py with --resize SIZE --crop CROP:
ImageFolder(ROOT, Compose([Resize(SIZE), CenterCrop(CROP), ToTensor()])), DataLoader(2 workers,
batch 256, the same --subset random images in both epochs), epoch 1 after a fresh mount and
drop_caches, epoch 2 hot. Readers (ROOT):
  ext4        the JPEG source on ext4
  ext4_bmp    BMPs of Resize(SIZE) written by PIL to ext4 (the ceiling of bmp-SIZE: no FUSE)
  ext4_jpeg   JPEGs (q90) of Resize(SIZE) written by PIL to ext4 (the ceiling of jpeg-SIZE)
  dsfs        the dsfs mount's original tree
  bmp         MOUNT/.dsfs/bmp-SIZE
  jpeg        MOUNT/.dsfs/jpeg-SIZE
  kernel_bmp  dsfs mount -o kernel,view=bmp-SIZE (EROFS in the kernel)
Also: the store's size, each tree's footprint (the bytes a reader's files take: what the page
cache holds once an epoch has read them, after the view rendered them), the daemon's resize
counters. Writes bench/results/resize/resize-<date>.md and .jsonl. Mounts only under WORK/mnt and
unmounts what it mounted, even on failure.
"""
import argparse
import json
import os
import platform
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import bench_util  # noqa: E402
from bench_util import PY, REPO, Mount, drop_caches, sh  # noqa: E402

READERS = ["ext4", "ext4_bmp", "ext4_jpeg", "dsfs", "bmp", "jpeg", "kernel_bmp"]


def log(msg):
    print(f"resize_bench: {msg}", file=sys.stderr, flush=True)


def tree_bytes(root):
    total = files = 0
    for dirpath, _, names in os.walk(root):
        for n in names:
            total += os.stat(os.path.join(dirpath, n)).st_size
            files += 1
    return files, total


def write_resized(src, out, size, fmt):
    """PIL's Resize(size) of every image of `src`, as BMP or JPEG q90, under the same names."""
    stamp = os.path.join(out, ".complete")
    if os.path.exists(stamp):
        return
    shutil.rmtree(out, ignore_errors=True)
    code = """
import os, sys
from concurrent.futures import ProcessPoolExecutor
from PIL import Image
from torchvision import transforms
src, out, size, fmt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
r = transforms.Resize(size)
def one(rel):
    with Image.open(os.path.join(src, rel)) as im:
        img = r(im.convert("RGB"))
    dst = os.path.join(out, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(dst, "wb") as f:
        img.save(f, "BMP" if fmt == "bmp" else "JPEG", **({} if fmt == "bmp" else {"quality": 90}))
rels = sorted(os.path.relpath(os.path.join(d, n), src) for d, _, ns in os.walk(src) for n in ns)
with ProcessPoolExecutor(2) as ex:
    list(ex.map(one, rels, chunksize=64))
"""
    r = sh([PY, "-c", code, src, out, str(size), fmt], timeout=7200)
    if r.returncode != 0:
        raise RuntimeError(f"writing {out}: {r.stderr.strip()[-500:]}")
    open(stamp, "w").close()


def imagefolder(root, subset, size, crop, label):
    res = bench_util.imagefolder(root, subset, label,
                                  ["--resize", str(size), "--crop", str(crop)], timeout=3600)
    res["images"] = res.pop("epoch_images")  # the images an epoch read
    return res


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--dataset", default="photos20k")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--subset", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--readers", nargs="+", default=READERS, choices=READERS)
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    a = ap.parse_args()
    dsfs = os.path.abspath(a.dsfs)
    src = os.path.join(a.work, a.dataset)
    if not os.path.isdir(src):
        sys.exit(f"resize_bench: {src} is missing (bench/lib/datasets.py photos {src})")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = bench_util.results_dir("resize")
    os.makedirs(out_dir, exist_ok=True)
    mnt = os.path.join(a.work, "mnt", "resize")
    store = os.path.join(a.work, f"{a.dataset}.dsfs")
    rows = []

    if not os.path.exists(store):
        t0 = time.monotonic()
        r = sh([dsfs, "pack", "-q", src, store])
        if r.returncode != 0:
            sys.exit(f"resize_bench: pack: {r.stderr.strip()}")
        log(f"packed {store} in {time.monotonic() - t0:.1f} s")
    files, src_bytes = tree_bytes(src)
    store_bytes = sum(os.path.getsize(os.path.join(dp, n))
                      for dp, _, ns in os.walk(store) for n in ns) if os.path.isdir(store) \
        else os.path.getsize(store)
    bmp_copy = os.path.join(a.work, f"{a.dataset}.bmp-{a.size}")
    jpeg_copy = os.path.join(a.work, f"{a.dataset}.jpeg-{a.size}")
    for reader, path, fmt in (("ext4_bmp", bmp_copy, "bmp"), ("ext4_jpeg", jpeg_copy, "jpeg")):
        if reader in a.readers:
            t0 = time.monotonic()
            write_resized(src, path, a.size, fmt)
            log(f"{path} ready ({time.monotonic() - t0:.0f} s)")
    footprint = {"ext4": src_bytes}
    for reader, path in (("ext4_bmp", bmp_copy), ("ext4_jpeg", jpeg_copy)):
        if os.path.isdir(path):
            footprint[reader] = tree_bytes(path)[1] 
    view = {"bmp": f"bmp-{a.size}", "jpeg": f"jpeg-{a.size}"}
    results = {r: [] for r in a.readers}
    counters = {}
    for rnd in range(a.rounds):
        for reader in a.readers:
            label = f"{reader}#{rnd + 1}"
            if reader.startswith("ext4"):
                root = {"ext4": src, "ext4_bmp": bmp_copy, "ext4_jpeg": jpeg_copy}[reader]
                drop_caches()
                res = imagefolder(root, a.subset, a.size, a.crop, label)
            else:
                opts = ["-o", f"kernel,view=bmp-{a.size}"] if reader == "kernel_bmp" else []
                drop_caches()
                with Mount(dsfs, store, mnt, opts) as m:
                    root = mnt if reader in ("dsfs", "kernel_bmp") else \
                        os.path.join(mnt, ".dsfs", view[reader])
                    res = imagefolder(root, a.subset, a.size, a.crop, label)
                    if reader in ("bmp", "jpeg"):
                        st = m.stats()
                        counters[reader] = st.get("views", {})
                        if rnd == 0:
                            footprint[reader] = tree_bytes(root)[1]
            res.update({"reader": reader, "round": rnd + 1})
            log(json.dumps(res))
            rows.append(res)
            results[reader].append(res)

    med = {r: {k: median([x[k] for x in v]) for k in ("epoch1", "epoch2")}
           for r, v in results.items() if v}
    base = med.get("ext4")
    lines = [f"# Resized views: Resize({a.size}) + CenterCrop({a.crop}) + ToTensor, {stamp}", "",
             f"- machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.release()}"
             + (f"; {a.desc}" if a.desc else ""),
             f"- tree: {src}: {files} JPEG photographs, {src_bytes / 1e6:.1f} MB; store "
             f"{store_bytes / 1e6:.1f} MB",
             f"- bench/lib/imagefolder_read.py --resize {a.size} --crop {a.crop}: DataLoader(2 "
             f"workers, batch 256), the same {a.subset} random images per epoch; epoch 1 after "
             f"a fresh mount and drop_caches, epoch 2 hot; medians of {a.rounds} round(s)", "",
             "| reader | epoch 1 img/s | x ext4 | epoch 2 img/s | x ext4 | footprint MB |",
             "|---|---|---|---|---|---|"]
    for r in a.readers:
        if r not in med:
            continue
        e1, e2 = med[r]["epoch1"], med[r]["epoch2"]
        x1 = f"{e1 / base['epoch1']:.2f}x" if base and e1 else ""
        x2 = f"{e2 / base['epoch2']:.2f}x" if base and e2 else ""
        fp = footprint.get(r if r != "kernel_bmp" else "bmp")
        lines.append(f"| {r} | {e1} | {x1} | {e2} | {x2} | "
                     f"{'' if fp is None else f'{fp / 1e6:.1f}'} |")
    if counters:
        lines += ["", "Daemon counters after the last round (views.*): " +
                  "; ".join(f"{k}: {json.dumps(v)}" for k, v in counters.items())]
    md = os.path.join(out_dir, f"resize-{stamp}.md")
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, f"resize-{stamp}.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.write(json.dumps({"summary": med, "footprint": footprint, "store_bytes": store_bytes,
                            "files": files}) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
