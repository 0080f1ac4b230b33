#!/usr/bin/python3
"""The kernel path (issue 15): an unmodified ImageFolder script over ext4, dsfs classic and
dsfs `-o kernel`, side by side in one run.

  /usr/bin/python3 bench/kernel_bench.py [--dsfs BUILD/dsfs] [--work /var/tmp/dsfs-bench]
                                         [--datasets fmnist photo32] [--subset 20000]
                                         [--rounds 1]

Per data set (fmnist: Fashion-MNIST, 70,000 28x28 PNGs; photo32: 32x32 JPEG photo crops, both
built by bench/datasets.py), one `dsfs pack`, then for each reader, in turn, round after round:
ImageFolder(ROOT, transform=ToTensor()) + DataLoader(2 workers, batch 256) over the same
--subset random images in both epochs (bench/imagefolder_read.py); epoch 1 after a fresh mount
and drop_caches, epoch 2 hot. Readers:
  - the source tree on ext4, and the bmp view's files copied to ext4 (what the bmp view can reach
    without any FUSE);
  - dsfs classic: the original tree and `-o view=bmp`;
  - dsfs `-o kernel`: the original tree and `-o kernel,view=bmp`.
Writes bench/results/kernel-<date>.md and .jsonl (medians over rounds). Mounts only under
WORK/mnt and unmounts what it mounted, even on failure.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from views_bench import PY, REPO, Mount, drop_caches, imagefolder, sh  # noqa: E402

READERS = (
    ("ext4", "ImageFolder, source on ext4", None),
    ("ext4_bmp", "ImageFolder, the bmp view's files copied to ext4", None),
    ("classic", "dsfs classic, original tree", []),
    ("classic_bmp", "dsfs classic, -o view=bmp", ["-o", "view=bmp"]),
    ("kernel", "dsfs -o kernel, original tree", ["-o", "kernel"]),
    ("kernel_bmp", "dsfs -o kernel,view=bmp", ["-o", "kernel,view=bmp"]),
)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--datasets", nargs="+", default=["fmnist", "photo32"])
    ap.add_argument("--subset", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--photo-count", type=int, default=150000)
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    a = ap.parse_args()
    dsfs = os.path.abspath(a.dsfs)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = os.path.join(REPO, "bench", "results")
    jsonl = open(os.path.join(out_dir, f"kernel-{stamp}.jsonl"), "w")
    mnt = os.path.join(a.work, "mnt", "kernel")
    results = {}

    def rec(ds, key, value):
        results.setdefault(ds, {}).setdefault(key, []).append(value)
        jsonl.write(json.dumps({"ds": ds, "metric": key, "data": value}) + "\n")
        jsonl.flush()
        print(f"[{time.strftime('%H:%M:%S')}] {ds} {key}: {value}", flush=True)

    for ds in a.datasets:
        src = os.path.join(a.work, ds if ds != "photo32" or a.photo_count == 150000
                           else f"photo32-{a.photo_count}")
        if not os.path.isdir(src):
            gen = {"photo32": ["photo-crops", src, "--count", str(a.photo_count)],
                   "fmnist": ["fashion-mnist", src]}[ds]
            r = sh([PY, os.path.join(REPO, "bench", "datasets.py"), *gen])
            if r.returncode != 0:
                raise SystemExit(f"cannot build {ds}: {r.stderr.strip()}")
        store = os.path.join(a.work, f"{ds}.kernel.dsfs")
        t0 = time.perf_counter()
        r = sh([dsfs, "pack", "-q", "-f", src, store])
        if r.returncode != 0:
            raise SystemExit(f"pack {ds}: {r.stderr.strip()}")
        rec(ds, "pack", {"seconds": round(time.perf_counter() - t0, 2),
                         "bytes": os.path.getsize(store)})
        # The bmp view's files on ext4: the ceiling of the bmp view without FUSE.
        bmp_copy = os.path.join(a.work, f"{ds}.bmp-copy")
        if not os.path.isdir(bmp_copy):
            with Mount(dsfs, store, mnt, ["-o", "view=bmp"]):
                shutil.copytree(mnt, bmp_copy + ".partial", ignore=shutil.ignore_patterns(".dsfs"))
            os.rename(bmp_copy + ".partial", bmp_copy)
        for _ in range(a.rounds):
            for key, label, opts in READERS:
                drop_caches()
                if opts is None:
                    root = src if key == "ext4" else bmp_copy
                    rec(ds, key, imagefolder(root, a.subset, key))
                    continue
                t0 = time.perf_counter()
                with Mount(dsfs, store, mnt, opts):
                    mount_s = time.perf_counter() - t0
                    drop_caches()
                    res = imagefolder(mnt, a.subset, key)
                    res["mount_s"] = round(mount_s, 3)
                    rec(ds, key, res)

    def med(vals, field):
        return statistics.median(v[field] for v in vals)

    lines = [f"# dsfs -o kernel: unmodified ImageFolder, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM, "
             f"kernel {platform.release()}",
             f"- dsfs: {dsfs} {a.desc}",
             f"- bench/imagefolder_read.py: ToTensor(), DataLoader(2 workers, batch 256), the same "
             f"{a.subset} random images in both epochs; epoch 1 after a fresh mount and "
             f"drop_caches; medians of {a.rounds} round(s), readers taking turns", ""]
    for ds, r in results.items():
        base = r["ext4"]
        lines += [f"## {ds}", "",
                  "| reader | epoch 1 img/s | epoch 2 img/s | epoch 1 vs ext4 | epoch 2 vs ext4 "
                  "| mount s |", "|---|---|---|---|---|---|"]
        for key, label, opts in READERS:
            v = r[key]
            e1, e2 = med(v, "epoch1"), med(v, "epoch2")
            m = f"{med(v, 'mount_s'):.2f}" if opts is not None else ""
            lines.append(f"| {label} | {e1:,.0f} | {e2:,.0f} | {e1 / med(base, 'epoch1'):.2f}x | "
                         f"{e2 / med(base, 'epoch2'):.2f}x | {m} |")
        p = r["pack"][0]
        lines += ["", f"Store: {p['bytes'] / 1e6:.1f} MB, packed in {p['seconds']:.1f} s.", ""]
    lines += ["Raw figures: the .jsonl beside this file; command: `bench/kernel_bench.py`.", ""]
    md = os.path.join(out_dir, f"kernel-{stamp}.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
