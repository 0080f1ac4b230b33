#!/usr/bin/python3
"""The kernel path (issue 15): an unmodified ImageFolder script over ext4, dsfs classic and
dsfs `-o kernel`, side by side in one run.

  /usr/bin/python3 bench/kernel_bench.py [--dsfs BUILD/dsfs] [--work /var/tmp/dsfs-bench]
                                         [--datasets fmnist photo32] [--subset 20000]
                                         [--rounds 1] [--readers KEY...] [--skip-files]

Per data set (fmnist: Fashion-MNIST, 70,000 28x28 PNGs; photo32: 32x32 JPEG photo crops, both
built by bench/lib/datasets.py), one `dsfs pack`, then for each reader, in turn, round after round:
ImageFolder(ROOT, transform=ToTensor()) + DataLoader(2 workers, batch 256) over the same
--subset random images in both epochs (bench/lib/imagefolder_read.py); epoch 1 after a fresh mount
and drop_caches, epoch 2 hot. Readers:
  - the source tree on ext4, and the bmp view's files copied to ext4 (what the bmp view can reach
    without any FUSE);
  - dsfs classic: the original tree and `-o view=bmp`;
  - dsfs `-o kernel`: the original tree and `-o kernel,view=bmp`.
  - dsfs `-o kernel=loop`: the original tree over a loop device with direct I/O (what kernels
    without file-backed EROFS mounts get);
  - dsfs classic over FUSE over io_uring (-o transport=uring, with the fuse module's
    enable_uring set to Y for those mounts and put back): the original tree and the bmp view;
  - dsfs classic and over io_uring with the daemon in a session of its own (`setsid dsfs
    mount`: another scheduler autogroup than the reader, as a daemon started elsewhere is).
Then, per data set, shuffled open+read+close of the --subset files with bench/tools/readbench.cc
(dsfs-readbench, 1 and 4 threads; pass 1 after a fresh mount and drop_caches, then the median
of 5 hot passes) on
ext4, a tmpfs copy, dsfs classic and dsfs -o kernel. With --scale STORE..., for each store:
`dsfs mount -o kernel` after drop_caches (seconds until it returns, the layout's own time and
memory, the daemon's VmRSS/VmHWM), against a classic mount of the same store.
Writes bench/results/kernel/kernel-<date>.md and .jsonl (medians over rounds). Mounts only under
WORK/mnt and unmounts what it mounted, even on failure.
"""
import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import (LIB, PY, READBENCH, REPO, Mount, daemon_memory, drop_caches,  # noqa: E402
                        imagefolder, readbench, results_dir, sh)

READERS = (
    ("ext4", "ImageFolder, source on ext4", None),
    ("ext4_bmp", "ImageFolder, the bmp view's files copied to ext4", None),
    ("classic", "dsfs classic, original tree", []),
    ("classic_bmp", "dsfs classic, -o view=bmp", ["-o", "view=bmp"]),
    ("kernel", "dsfs -o kernel, original tree", ["-o", "kernel"]),
    ("kernel_bmp", "dsfs -o kernel,view=bmp", ["-o", "kernel,view=bmp"]),
    ("kernel_loop", "dsfs -o kernel=loop, original tree", ["-o", "kernel=loop"]),
    ("uring", "dsfs FUSE over io_uring, original tree", ["-o", "transport=uring"]),
    ("uring_bmp", "dsfs FUSE over io_uring, -o view=bmp", ["-o", "transport=uring,view=bmp"]),
    # The daemon in a session of its own (`setsid dsfs mount`): another scheduler autogroup than
    # the reader, as a daemon started elsewhere would be (docs/io_uring.md).
    ("classic_setsid", "dsfs classic, original tree, daemon in its own session", []),
    ("uring_setsid", "dsfs FUSE over io_uring, original tree, daemon in its own session",
     ["-o", "transport=uring"]),
)
ENABLE_URING = "/sys/module/fuse/parameters/enable_uring"


class EnableUring:
    """The fuse module's enable_uring set to Y while the io_uring readers mount, then put back
    (the kernel offers the ring only to mounts made while it is Y)."""

    def __enter__(self):
        try:
            with open(ENABLE_URING) as f:
                self.saved = f.read().strip()
            with open(ENABLE_URING, "w") as f:
                f.write("Y\n")
        except OSError:
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is not None:
            with open(ENABLE_URING, "w") as f:
                f.write(self.saved + "\n")
        return False
FILES_READERS = (
    ("ext4", "source on ext4"),
    ("tmpfs", "tmpfs copy"),
    ("classic", "dsfs classic"),
    ("kernel", "dsfs -o kernel"),
)


def read_passes(tool, root, listing, threads):
    """dsfs-readbench's JSON lines over `listing`: pass 1 (cold), then 5 hot passes."""
    return readbench(tool, root, listing, threads, 6, timeout=None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--datasets", nargs="*", default=["fmnist", "photo32"])
    ap.add_argument("--subset", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--photo-count", type=int, default=150000)
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--scale", nargs="*", default=[], metavar="STORE",
                    help="stores whose -o kernel mount time and memory to measure")
    ap.add_argument("--skip-imagefolder", action="store_true")
    ap.add_argument("--skip-files", action="store_true",
                    help="no open+read+close runs (dsfs-readbench) after the ImageFolder ones")
    ap.add_argument("--readers", nargs="+", default=[k for k, _, _ in READERS],
                    help="ImageFolder readers to run (ext4 always runs: the baseline)")
    a = ap.parse_args()
    dsfs = os.path.abspath(a.dsfs)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = results_dir("kernel")
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
            r = sh([PY, os.path.join(LIB, "datasets.py"), *gen])
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
        bmp_copy = src + ".bmp-copy"
        if not os.path.isdir(bmp_copy):
            with Mount(dsfs, store, mnt, ["-o", "view=bmp"]):
                shutil.copytree(mnt, bmp_copy + ".partial", ignore=shutil.ignore_patterns(".dsfs"))
            os.rename(bmp_copy + ".partial", bmp_copy)
        setsid_dsfs = os.path.join(a.work, "dsfs-setsid")
        with open(setsid_dsfs, "w") as f:
            f.write(f'#!/bin/sh\nexec setsid -w {dsfs} "$@"\n')
        os.chmod(setsid_dsfs, 0o755)
        for _ in range(0 if a.skip_imagefolder else a.rounds):
            for key, label, opts in READERS:
                if key != "ext4" and key not in a.readers:
                    continue
                drop_caches()
                if opts is None:
                    root = src if key == "ext4" else bmp_copy
                    rec(ds, key, imagefolder(root, a.subset, key))
                    continue
                t0 = time.perf_counter()
                with EnableUring() if key.startswith("uring") else contextlib.nullcontext(), \
                        Mount(setsid_dsfs if key.endswith("_setsid") else dsfs, store, mnt,
                              opts) as m:
                    mount_s = time.perf_counter() - t0
                    drop_caches()
                    if key.startswith("uring"):
                        serving = m.stats().get("transport", {}).get("serving", "")
                        if not serving.startswith("uring"):
                            raise SystemExit(f"{key}: the mount is not served over io_uring: "
                                             f"{serving}")
                    res = imagefolder(mnt, a.subset, key)
                    res["mount_s"] = round(mount_s, 3)
                    rec(ds, key, res)

        if a.skip_files:
            continue
        # Shuffled open+read+close of the same files, no Python in the loop.
        listing = os.path.join(a.work, f"{ds}.kernel-bench.list")
        r = sh([a.readbench, src, "--write-list", listing])
        if r.returncode != 0:
            raise SystemExit(f"dsfs-readbench --write-list: {r.stderr.strip()}")
        with open(listing) as f:
            paths = f.read().splitlines()
        with open(listing, "w") as f:
            # A fixed random sample: every class directory, as the ImageFolder runs touch them.
            f.write("\n".join(random.Random(7).sample(paths, min(a.subset, len(paths)))) + "\n")
        tmpfs = os.path.join(a.work, "mnt", "kernel-tmpfs")
        os.makedirs(tmpfs, exist_ok=True)
        sh(["mount", "-t", "tmpfs", "-o", "size=90%", "tmpfs", tmpfs])
        try:
            shutil.copytree(src, tmpfs, dirs_exist_ok=True)
            for _ in range(a.rounds):
                for key, label in FILES_READERS:
                    for threads in (1, 4):
                        drop_caches()
                        if key in ("ext4", "tmpfs"):
                            passes = read_passes(a.readbench, src if key == "ext4" else tmpfs,
                                               listing, threads)
                        else:
                            with Mount(dsfs, store, mnt, ["-o", "kernel"] if key == "kernel"
                                       else []):
                                drop_caches()
                                passes = read_passes(a.readbench, mnt, listing, threads)
                        rec(ds, f"files_{key}_t{threads}",
                            {"cold": passes[0]["files_per_s"],
                             "hot": statistics.median(p["files_per_s"] for p in passes[1:]),
                             "errors": sum(p["errors"] for p in passes)})
        finally:
            sh(["umount", tmpfs])

    for store in a.scale:
        name = os.path.basename(store)
        for key, opts in (("classic", []), ("kernel", ["-o", "kernel"])):
            for _ in range(a.rounds):
                drop_caches()
                t0 = time.perf_counter()
                with Mount(dsfs, store, mnt, opts):
                    mount_s = time.perf_counter() - t0
                    res = {"mount_s": round(mount_s, 3), **daemon_memory(os.path.abspath(mnt))}
                    if key == "kernel":
                        r = sh([dsfs, "stats", "--json", mnt])
                        k = json.loads(r.stdout).get("kernel", {})
                        res.update({f: k.get(f) for f in ("inodes", "layout_ms", "layout_bytes",
                                                          "image_bytes")})
                    rec(name, f"scale_{key}", res)

    def med(vals, field):
        return statistics.median(v[field] for v in vals)

    lines = [f"# dsfs -o kernel: unmodified ImageFolder, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM, "
             f"kernel {platform.release()}",
             f"- dsfs: {dsfs} {a.desc}",
             f"- bench/lib/imagefolder_read.py: ToTensor(), DataLoader(2 workers, batch 256), the same "
             f"{a.subset} random images in both epochs; epoch 1 after a fresh mount and "
             f"drop_caches; medians of {a.rounds} round(s), readers taking turns", ""]
    for ds, r in results.items():
        if "scale_kernel" in r:
            k, c = r["scale_kernel"], r["scale_classic"]
            lines += [f"## Mount of {ds}: {k[0]['inodes']:,} inodes", "",
                      "| mount | s until `dsfs mount` returns | layout ms | layout MB "
                      "| daemon VmRSS MB (anonymous + store pages mapped) | VmHWM MB |",
                      "|---|---|---|---|---|---|",
                      f"| classic | {med(c, 'mount_s'):.3f} | | | {med(c, 'VmRSS') / 1024:.1f} "
                      f"({med(c, 'RssAnon') / 1024:.1f} + {med(c, 'RssFile') / 1024:.1f}) "
                      f"| {med(c, 'VmHWM') / 1024:.1f} |",
                      f"| -o kernel | {med(k, 'mount_s'):.3f} | {med(k, 'layout_ms'):.0f} "
                      f"| {med(k, 'layout_bytes') / 1e6:.1f} | {med(k, 'VmRSS') / 1024:.1f} "
                      f"({med(k, 'RssAnon') / 1024:.1f} + {med(k, 'RssFile') / 1024:.1f}) "
                      f"| {med(k, 'VmHWM') / 1024:.1f} |", ""]
            continue
        if "files_ext4_t1" in r:
            lines += [f"## {ds}: shuffled open+read+close, files/s (dsfs-readbench)", "",
                      "| reader | 1 thread cold | 1 thread hot | 4 threads cold | 4 threads hot "
                      "| hot vs tmpfs (1 / 4) |", "|---|---|---|---|---|---|"]
            for key, label in FILES_READERS:
                t1, t4 = r[f"files_{key}_t1"], r[f"files_{key}_t4"]
                tm1, tm4 = r["files_tmpfs_t1"], r["files_tmpfs_t4"]
                lines.append(f"| {label} | {med(t1, 'cold'):,.0f} | {med(t1, 'hot'):,.0f} | "
                             f"{med(t4, 'cold'):,.0f} | {med(t4, 'hot'):,.0f} | "
                             f"{med(t1, 'hot') / med(tm1, 'hot'):.2f}x / "
                             f"{med(t4, 'hot') / med(tm4, 'hot'):.2f}x |")
            lines.append("")
        if "ext4" not in r:
            continue
        base = r["ext4"]
        lines += [f"## {ds}", "",
                  "| reader | epoch 1 img/s | epoch 2 img/s | epoch 1 vs ext4 | epoch 2 vs ext4 "
                  "| mount s |", "|---|---|---|---|---|---|"]
        for key, label, opts in READERS:
            if key not in r:
                continue
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
    subprocess.run([PY, os.path.join(LIB, "plot.py"),
                    os.path.join(out_dir, f"kernel-{stamp}.jsonl")], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
