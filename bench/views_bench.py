#!/usr/bin/python3
"""The decoded-views benchmark (issue 4): an unmodified ImageFolder script, side by side.

  /usr/bin/python3 bench/views_bench.py [--dsfs BUILD/dsfs] [--work /var/tmp/dsfs-bench]
                                        [--datasets photo32 fmnist] [--subset 20000]

Per data set (photo32: 150,000 32x32 JPEG photo crops; fmnist: Fashion-MNIST, 70,000 28x28 PNGs,
both built by bench/lib/datasets.py as for the core benchmark), in one run:
  - `dsfs pack` and `dsfs pack --predecode`: time and size;
  - ImageFolder(ROOT, transform=ToTensor()) + DataLoader(2 workers, batch 256, shuffled) over the
    same --subset random images each epoch (bench/lib/imagefolder_read.py), epoch 1 after
    drop_caches (and a fresh mount) and epoch 2, with ROOT = the source tree on ext4, the dsfs
    mount (original files), the bmp view of the plain store (decoded on demand) and the bmp view
    of the --predecode store;
  - the 3-line loader over the tensor view's images.npy/labels.npy of the whole tree
    (np.load(mmap_mode="r"), random batches of 256, converted to float CHW tensors as ToTensor
    would), epoch 1 after drop_caches and epoch 2;
  - the ratios the issue sets as targets.
Writes bench/results/views/views-<date>.md and .jsonl. Mounts only under WORK/mnt, unmounts what it
mounted, even on failure.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import LIB, PY, REPO, Mount, drop_caches, epochs_of, imagefolder, results_dir, sh  # noqa: E402

# The 3-line loader, as a user would write it (plus timing): random batches straight from the map.
TENSOR_LOADER = r"""
import json, sys, time
import numpy as np, torch
root, epochs, batch = sys.argv[1], int(sys.argv[2]), 256
images = np.load(root + "/images.npy", mmap_mode="r")      # 1
labels = torch.from_numpy(np.load(root + "/labels.npy"))   # 2
for epoch in range(1, epochs + 1):
    t0, n = time.perf_counter(), 0
    for idx in torch.randperm(len(labels)).split(batch):
        idx = idx.sort().values
        x = torch.from_numpy(images[idx.numpy()]).permute(0, 3, 1, 2).float().div_(255)  # 3
        y = labels[idx]
        n += x.shape[0]
    el = time.perf_counter() - t0
    print(json.dumps({"event": "epoch", "epoch": epoch, "images": n, "elapsed_s": round(el, 3),
                      "images_per_s": round(n / el, 1)}), flush=True)
"""


def tensor_loader(root):
    r = sh([PY, "-c", TENSOR_LOADER, root, "2"], timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"tensor loader {root}: {r.stderr.strip()[-500:]}")
    ev = epochs_of(r.stdout)
    return {"images": ev[0]["images"], "epoch1": ev[0]["images_per_s"],
            "epoch2": ev[1]["images_per_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--datasets", nargs="+", default=["photo32", "fmnist"])
    ap.add_argument("--subset", type=int, default=20000)
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    a = ap.parse_args()
    dsfs = os.path.abspath(a.dsfs)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = results_dir("views")
    jsonl = open(os.path.join(out_dir, f"views-{stamp}.jsonl"), "w")
    mnt = os.path.join(a.work, "mnt", "views")
    results = {}

    def rec(ds, key, value):
        results.setdefault(ds, {})[key] = value
        jsonl.write(json.dumps({"ds": ds, "metric": key, "data": value}) + "\n")
        jsonl.flush()
        print(f"[{time.strftime('%H:%M:%S')}] {ds} {key}: {value}", flush=True)

    for ds in a.datasets:
        src = os.path.join(a.work, ds)
        if not os.path.isdir(src):
            gen = {"photo32": ["photo-crops", src, "--count", "150000"],
                   "fmnist": ["fashion-mnist", src]}[ds]
            r = sh([PY, os.path.join(LIB, "datasets.py"), *gen])
            if r.returncode != 0:
                raise SystemExit(f"cannot build {ds}: {r.stderr.strip()}")
        stores = {}
        for kind, opts in (("plain", []), ("predecode", ["--predecode"])):
            store = os.path.join(a.work, f"{ds}.views-{kind}.dsfs")
            t0 = time.perf_counter()
            r = sh([dsfs, "pack", "-q", "-f", *opts, src, store])
            if r.returncode != 0:
                raise SystemExit(f"pack {ds}: {r.stderr.strip()}")
            rec(ds, f"pack_{kind}", {"seconds": round(time.perf_counter() - t0, 2),
                                     "bytes": os.path.getsize(store),
                                     "summary": r.stdout.strip()})
            stores[kind] = store
        drop_caches()
        rec(ds, "imagefolder_ext4", imagefolder(src, a.subset, "ext4"))
        for name, store, sub in (("dsfs_original", stores["plain"], ""),
                                 ("dsfs_bmp", stores["plain"], ".dsfs/bmp"),
                                 ("dsfs_bmp_predecode", stores["predecode"], ".dsfs/bmp")):
            drop_caches()
            with Mount(dsfs, store, mnt) as m:
                res = imagefolder(os.path.join(mnt, sub), a.subset, name)
                st = m.stats()
                res["decoded"] = st.get("views", {}).get("images_decoded")
                rec(ds, f"imagefolder_{name}", res)
        for name, store in (("tensor", stores["plain"]), ("tensor_predecode", stores["predecode"])):
            drop_caches()
            with Mount(dsfs, store, mnt) as m:
                rec(ds, name, tensor_loader(os.path.join(mnt, ".dsfs", "tensor")))

    # The report.
    lines = [f"# dsfs decoded views: unmodified ImageFolder vs views, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM, "
             f"kernel {platform.release()}",
             f"- dsfs: {dsfs} {a.desc}",
             f"- ImageFolder runs: bench/lib/imagefolder_read.py, ToTensor(), DataLoader(2 workers, "
             f"batch 256, shuffled), the same {a.subset} random images in both epochs; epoch 1 "
             f"after drop_caches and a fresh mount",
             "- tensor: the 3-line loader over MOUNT/.dsfs/tensor/images.npy (mmap, random "
             "batches of 256 of the whole tree, to float CHW), epoch 1 after drop_caches", ""]
    for ds, r in results.items():
        base = r["imagefolder_ext4"]
        lines += [f"## {ds}", "",
                  "| reader | epoch 1 images/s | epoch 2 images/s | epoch 2 vs ext4 |",
                  "|---|---|---|---|"]
        for key, label in (("imagefolder_ext4", "ImageFolder, source on ext4"),
                           ("imagefolder_dsfs_original", "ImageFolder, dsfs original files"),
                           ("imagefolder_dsfs_bmp", "ImageFolder, dsfs bmp view (decode on demand)"),
                           ("imagefolder_dsfs_bmp_predecode", "ImageFolder, dsfs bmp view (--predecode)"),
                           ("tensor", "3-line loader, dsfs tensor view"),
                           ("tensor_predecode", "3-line loader, dsfs tensor view (--predecode)")):
            v = r[key]
            lines.append(f"| {label} | {v['epoch1']:,.0f} | {v['epoch2']:,.0f} | "
                         f"{v['epoch2'] / base['epoch2']:.2f}x |")
        lines += ["", "| store | pack s | size MB |", "|---|---|---|"]
        for kind in ("plain", "predecode"):
            p = r[f"pack_{kind}"]
            lines.append(f"| {kind} | {p['seconds']:.1f} | {p['bytes'] / 1e6:.1f} |")
        lines.append("")
    lines += ["Raw figures: the .jsonl beside this file; command: `bench/views_bench.py`.", ""]
    md = os.path.join(out_dir, f"views-{stamp}.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    # The charts of these results and the README's (bench/lib/plot.py), beside them.
    subprocess.run([PY, os.path.join(LIB, "plot.py"), os.path.join(out_dir, f"views-{stamp}.jsonl")],
                   check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
