#!/usr/bin/python3
"""Where an ImageFolder sample's time goes, per step, on each tree (issue 4's bmp targets).

  /usr/bin/python3 bench/sample_costs.py [--dsfs BUILD/dsfs] [--work /var/tmp/dsfs-bench]
                                         [--datasets photo32 fmnist] [--files 3000]

For N random images of each data set, hot (every file read once before timing), in one process
with one torch thread, as in a DataLoader worker (no DataLoader), the mean microseconds per sample of:
  - open+read+close as torchvision's default loader does it (`open(path, "rb")`: Python 3.11
    calls isatty() on it, an ioctl that a FUSE file system must answer);
  - the same with `open(path, "rb", buffering=0)` (no isatty);
  - PIL: Image.open of the bytes + convert("RGB") (decoding);
  - ToTensor() of the image;
  - the whole sample: default_loader(path) + ToTensor(), as ImageFolder's __getitem__ does,
    and the same without the isatty() of open();
on: the source tree on ext4, a copy of the dsfs bmp view's files on ext4 (BMP without FUSE:
what any file system serving BMP could reach at best), dsfs original files and the dsfs bmp
view (a --predecode store). Every step of every tree is timed in turn, round after round, and
the median kept. Writes bench/results/sample-costs/sample-costs-<date>.md and .jsonl.
"""
import argparse
import io
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time

import torch
from PIL import Image
from torchvision.datasets.folder import default_loader
from torchvision.transforms import ToTensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import LIB, REPO, Mount, results_dir  # noqa: E402

IMAGE_EXT = (".jpg", ".jpeg", ".png")


def per_sample_us(fn, items):
    t0 = time.perf_counter()
    for x in items:
        fn(x)
    return (time.perf_counter() - t0) / len(items) * 1e6


def read_default(p):
    with open(p, "rb") as f:
        return f.read()


def read_unbuffered(p):
    with open(p, "rb", buffering=0) as f:
        return f.read()


def loader_no_isatty(p):
    """default_loader without the isatty() of open(): the same PIL calls on a BufferedReader."""
    with open(p, "rb", buffering=0) as raw, io.BufferedReader(raw) as f:
        return Image.open(f).convert("RGB")


METRICS = ["open_read_default", "open_read_unbuffered", "decode", "to_tensor", "sample",
           "sample_no_isatty"]


def measure(trees, rounds):
    """Every metric of every tree, interleaved round by round (this VM's speed drifts by 10-30%
    within minutes); the median of `rounds` passes each."""
    to_tensor = ToTensor()
    state = []
    for _, paths in trees:
        for p in paths:  # hot: every file read once
            read_unbuffered(p)
        blobs = [read_unbuffered(p) for p in paths]
        images = [Image.open(io.BytesIO(b)).convert("RGB") for b in blobs]
        state.append({
            "open_read_default": (read_default, paths),
            "open_read_unbuffered": (read_unbuffered, paths),
            "decode": (lambda b: Image.open(io.BytesIO(b)).convert("RGB"), blobs),
            "to_tensor": (to_tensor, images),
            "sample": (lambda p: to_tensor(default_loader(p)), paths),
            "sample_no_isatty": (lambda p: to_tensor(loader_no_isatty(p)), paths),
        })
    times = [{m: [] for m in METRICS} for _ in trees]
    for _ in range(rounds):
        for i, st in enumerate(state):
            for m in METRICS:
                fn, items = st[m]
                times[i][m].append(per_sample_us(fn, items))
    return [{m: round(statistics.median(t[m]), 1) for m in METRICS} for t in times]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--datasets", nargs="+", default=["photo32", "fmnist"])
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    a = ap.parse_args()
    # As in a DataLoader worker (torch's worker loop sets it): with torch's default intra-op
    # threads, ToTensor leaves OpenMP threads spinning on the other core, which delays the FUSE
    # daemon's answers (a measured 2-3x on dsfs rows) and is not what a worker sees.
    torch.set_num_threads(1)
    dsfs = os.path.abspath(a.dsfs)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("sample-costs"), f"sample-costs-{stamp}")
    res = {}
    with open(out + ".jsonl", "w") as jsonl:
        for ds in a.datasets:
            src = os.path.join(a.work, ds)
            store = os.path.join(a.work, f"{ds}.views-predecode.dsfs")
            if not os.path.isdir(src) or not os.path.exists(store):
                raise SystemExit(f"{src} or {store} missing: run bench/views_bench.py once")
            rel = []
            for d, _, files in os.walk(src):
                rel += [os.path.relpath(os.path.join(d, f), src) for f in files
                        if f.lower().endswith(IMAGE_EXT)]
            rel.sort()
            rel = random.Random(1).sample(rel, min(a.files, len(rel)))
            mnt = os.path.join(a.work, "mnt", "sample-costs")
            bmp_copy = os.path.join(a.work, f"{ds}.bmp-copy")
            shutil.rmtree(bmp_copy, ignore_errors=True)
            with Mount(dsfs, store, mnt):
                for r in rel:
                    os.makedirs(os.path.dirname(os.path.join(bmp_copy, r)), exist_ok=True)
                    shutil.copyfile(os.path.join(mnt, ".dsfs", "bmp", r), os.path.join(bmp_copy, r))
                trees = [("source files on ext4", src),
                         ("bmp view's files copied to ext4 (no FUSE)", bmp_copy),
                         ("dsfs original files", mnt),
                         ("dsfs bmp view (--predecode)", os.path.join(mnt, ".dsfs", "bmp"))]
                measured = measure([(label, [os.path.join(root, r) for r in rel])
                                    for label, root in trees], a.rounds)
                for (label, _), m in zip(trees, measured):
                    res.setdefault(ds, []).append((label, m))
                    jsonl.write(json.dumps({"ds": ds, "tree": label, **m}) + "\n")
                    jsonl.flush()
                    print(f"[{time.strftime('%H:%M:%S')}] {ds} {label}: {m}", flush=True)
            shutil.rmtree(bmp_copy, ignore_errors=True)

    lines = [f"# Per-sample costs of an ImageFolder sample, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, kernel {platform.release()}, Python "
             f"{platform.python_version()}; dsfs {dsfs} {a.desc}",
             f"- {a.files} random images per data set, hot, one process; every step of every "
             f"tree timed in turn, {a.rounds} rounds, the median; microseconds per sample",
             "- whole sample: `ToTensor()(default_loader(p))`, as ImageFolder's __getitem__; "
             "without isatty: the same PIL calls on `io.BufferedReader(open(p, \"rb\", "
             "buffering=0))`, which skips the isatty() ioctl that `open(p, \"rb\")` sends", ""]
    for ds, rows in res.items():
        lines += [f"## {ds}", "",
                  "| tree | open+read (`open(p, \"rb\")`) | open+read (buffering=0) | "
                  "PIL open+convert(\"RGB\") | ToTensor | whole sample | vs source on ext4 | "
                  "whole sample without isatty |",
                  "|---|---|---|---|---|---|---|---|"]
        base = rows[0][1]["sample"]
        for label, m in rows:
            lines.append(f"| {label} | {m['open_read_default']} | {m['open_read_unbuffered']} | "
                         f"{m['decode']} | {m['to_tensor']} | {m['sample']} | "
                         f"{base / m['sample']:.2f}x | {m['sample_no_isatty']} |")
        lines.append("")
    lines += ["Raw figures: the .jsonl beside this file; command: `bench/sample_costs.py`.", ""]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    # The charts of these results and the README's (bench/lib/plot.py), beside them.
    subprocess.run(["/usr/bin/python3", os.path.join(LIB, "plot.py"), out + ".jsonl"],
                   check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
