#!/usr/bin/python3
"""LMDB and RocksDB stores side by side (issue 5), in one run.

  /usr/bin/python3 bench/backend_bench.py [--dsfs BUILD/dsfs] [--readbench BUILD/bench/dsfs-readbench]
                                          [--work /var/tmp/dsfs-bench] [--datasets photo32 fmnist]
                                          [--scale-files N] [--add-files M] [--scale-store PATH]
                                          [--gentar BUILD/bench/dsfs-gentar]

Per data set (the core benchmark's trees, built by bench/lib/datasets.py if missing), for each
backend: `dsfs pack` time and store size; `dsfs add` of 1% more files (a copy of 1% of the
tree under a new directory) against a full repack of the grown tree; mount time; shuffled
open+read+close of every file (dsfs-readbench, the same shuffled list for both), first touch
after drop_caches and hot (1 and 4 threads); ImageFolder + DataLoader (2 workers, batch 256,
20,000 images, epochs 1 and 2).
--scale-files N (e.g. 10000000): for each backend, `dsfs-gentar --files N | dsfs pack -` (timed),
store size, mount time, daemon RSS after mount, and lstat of 100,000 random paths (4 threads,
after drop_caches and a fresh mount, then hot).
--add-files M (e.g. 1000000): for each backend, a store of M files packed from a dsfs-gentar
stream, then `dsfs add` of M/100 more files (a dsfs-gentar tree under a new top directory)
against a full repack of M + M/100 files from a stream.
--scale-store PATH (an LMDB store, e.g. bench/scale_bench.sh --keep-store's): `dsfs convert` to
RocksDB, then mount time (after drop_caches) and daemon RSS of both, 3 times each (medians).
--datasets with no names skips the per-data-set part.
Writes bench/results/backends/backends-<date>.md and .jsonl. Mounts only under WORK/mnt.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import (LIB, READBENCH, REPO, Mount, daemon_rss_kb, drop_caches,  # noqa: E402
                        imagefolder, readbench, results_dir, sh)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--datasets", nargs="*", default=["photo32", "fmnist"])
    ap.add_argument("--subset", type=int, default=20000)
    ap.add_argument("--scale-files", type=int, default=0)
    ap.add_argument("--add-files", type=int, default=0)
    ap.add_argument("--scale-store", default="")
    ap.add_argument("--gentar", default="")
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    a = ap.parse_args()
    dsfs, rb = os.path.abspath(a.dsfs), os.path.abspath(a.readbench)
    gentar = os.path.abspath(a.gentar or os.path.join(os.path.dirname(rb), "dsfs-gentar"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("backends"), f"backends-{stamp}")
    jsonl = open(out + ".jsonl", "w")
    mnt = os.path.join(a.work, "mnt", "backends")
    res = {}

    def rec(ds, key, value):
        res.setdefault(ds, {})[key] = value
        jsonl.write(json.dumps({"ds": ds, "metric": key, "data": value}) + "\n")
        jsonl.flush()
        print(f"[{time.strftime('%H:%M:%S')}] {ds} {key}: {value}", flush=True)

    for ds in a.datasets:
        src = os.path.join(a.work, ds)
        lst = os.path.join(a.work, ds + ".list")
        if not os.path.isdir(src):
            raise SystemExit(f"{src} missing: run bench/core_bench.sh once (it builds the trees)")
        if not os.path.exists(lst):
            sh([rb, src, "--write-list", lst])
        # The 1% to add: a copy of every 100th file, under a new top directory.
        extra = os.path.join(a.work, f"{ds}.add1pct")
        shutil.rmtree(extra, ignore_errors=True)
        with open(lst) as f:
            paths = [l.rstrip("\n") for l in f][::100]
        for p in paths:
            dst = os.path.join(extra, "added", os.path.relpath(os.path.join(src, p), src))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(os.path.join(src, p), dst)
        for backend in ("lmdb", "rocksdb"):
            store = os.path.join(a.work, f"{ds}.{backend}.dsfs")
            t0 = time.perf_counter()
            r = sh([dsfs, "pack", "-q", "-f", "--backend", backend, src, store])
            if r.returncode != 0:
                raise SystemExit(f"pack: {r.stderr.strip()}")
            pack_s = time.perf_counter() - t0
            size = int(sh(["du", "-sb", store]).stdout.split()[0])
            rec(ds, f"{backend}_pack", {"seconds": round(pack_s, 2), "bytes": size})
            drop_caches()
            t0 = time.perf_counter()
            with Mount(dsfs, store, mnt):
                mount_s = time.perf_counter() - t0
                cold = readbench(rb, mnt, lst, 4, 1)[0]
            drop_caches()
            with Mount(dsfs, store, mnt):
                cold1 = readbench(rb, mnt, lst, 1, 1)[0]
                hot1 = readbench(rb, mnt, lst, 1, 3)[-1]
                hot4 = readbench(rb, mnt, lst, 4, 3)[-1]
            rec(ds, f"{backend}_reads", {
                "mount_s": round(mount_s, 3), "cold_4t": cold["files_per_s"],
                "cold_1t": cold1["files_per_s"], "hot_1t": hot1["files_per_s"],
                "hot_4t": hot4["files_per_s"],
                "errors": cold["errors"] + cold1["errors"] + hot1["errors"] + hot4["errors"]})
            drop_caches()
            with Mount(dsfs, store, mnt):
                rec(ds, f"{backend}_imagefolder", imagefolder(mnt, a.subset, backend))
            # Growing the store by 1%, against packing the grown tree again.
            grown = store + ".grown"
            shutil.rmtree(grown, ignore_errors=True)
            if os.path.isdir(store):
                shutil.copytree(store, grown)
            else:
                shutil.copyfile(store, grown)
            t0 = time.perf_counter()
            r = sh([dsfs, "add", grown, os.path.join(extra, "added"), "--prefix", "added"])
            add_s = time.perf_counter() - t0
            if r.returncode != 0:
                raise SystemExit(f"add: {r.stderr.strip()}")
            # The grown tree to repack: a hard-linked copy (pack never follows symlinks).
            both = os.path.join(a.work, f"{ds}.grown-tree")
            shutil.rmtree(both, ignore_errors=True)
            sh(["cp", "-al", src, both])
            sh(["cp", "-al", os.path.join(extra, "added"), os.path.join(both, "added")])
            t0 = time.perf_counter()
            r = sh([dsfs, "pack", "-q", "-f", "--backend", backend, both, grown + ".repack"])
            repack_s = time.perf_counter() - t0
            rec(ds, f"{backend}_add", {"files": len(paths), "add_s": round(add_s, 3),
                                       "repack_s": round(repack_s, 2),
                                       "ratio": round(add_s / repack_s, 4)})
            for p in (grown, grown + ".repack"):
                if os.path.isdir(p):
                    shutil.rmtree(p)
                elif os.path.exists(p):
                    os.remove(p)
            shutil.rmtree(both, ignore_errors=True)
        shutil.rmtree(extra, ignore_errors=True)

    def pack_stream(backend, files, store, prefix="train"):
        """gentar | dsfs pack -: seconds (the pack's output goes to the log)."""
        shutil.rmtree(store, ignore_errors=True)
        if os.path.exists(store):
            os.remove(store)
        drop_caches()
        with open(log_path, "a") as log:
            t0 = time.perf_counter()
            gen = subprocess.Popen([gentar, "--files", str(files), "--prefix", prefix],
                                   stdout=subprocess.PIPE)
            r = subprocess.run([dsfs, "pack", "-q", "--backend", backend, "-", store],
                               stdin=gen.stdout, stdout=log, stderr=log, timeout=7200)
            gen.stdout.close()
            gen.wait()
            seconds = time.perf_counter() - t0
        if r.returncode != 0 or gen.returncode != 0:
            raise SystemExit(f"gentar | dsfs pack ({backend}, {files} files) failed: see {log_path}")
        return seconds

    def remove_store(store):
        if os.path.isdir(store):
            shutil.rmtree(store)
        elif os.path.exists(store):
            os.remove(store)

    log_path = os.path.join(a.work, "logs", f"backends-{stamp}.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    scale_dir = os.path.join(a.work, "scale-backends")
    os.makedirs(scale_dir, exist_ok=True)
    if a.scale_files:
        n = a.scale_files
        paths = os.path.join(scale_dir, "paths")
        with open(paths, "w") as f:
            subprocess.run([gentar, "--files", str(n), "--list", "100000"], stdout=f, check=True)
        for backend in ("lmdb", "rocksdb"):
            store = os.path.join(scale_dir, f"store.{backend}.dsfs")
            pack_s = pack_stream(backend, n, store)
            size = int(sh(["du", "-sb", store]).stdout.split()[0])
            drop_caches()
            t0 = time.perf_counter()
            with Mount(dsfs, store, mnt):
                mount_s = time.perf_counter() - t0
                rss = daemon_rss_kb(store)
                stat = readbench(rb, mnt, paths, 4, 2, "--stat")
            rec("scale", f"{backend}_scale", {
                "files": n, "pack_s": round(pack_s, 1), "bytes": size,
                "mount_s": round(mount_s, 3), "rss_kb": rss,
                "stat_cold_4t": stat[0]["files_per_s"], "stat_hot_4t": stat[1]["files_per_s"],
                "errors": stat[0]["errors"] + stat[1]["errors"]})
            remove_store(store)
        os.remove(paths)
    if a.add_files:
        m, extra = a.add_files, a.add_files // 100
        tree = os.path.join(scale_dir, "added-tree")
        shutil.rmtree(tree, ignore_errors=True)
        sh([gentar, "--files", str(extra), "--prefix", "added", "--seed", "2", "--tree", tree])
        for backend in ("lmdb", "rocksdb"):
            store = os.path.join(scale_dir, f"add.{backend}.dsfs")
            base_s = pack_stream(backend, m, store)
            drop_caches()
            t0 = time.perf_counter()
            r = sh([dsfs, "add", "-q", store, tree], timeout=3600)
            add_s = time.perf_counter() - t0
            if r.returncode != 0:
                raise SystemExit(f"add ({backend}): {r.stderr.strip()}")
            v = sh([dsfs, "info", "--json", store])
            files = json.loads(v.stdout).get("files") if v.returncode == 0 else None
            repack_s = pack_stream(backend, m + extra, store + ".repack")
            rec("add", f"{backend}_add_at_scale", {
                "base_files": m, "added_files": extra, "files_after": files,
                "pack_base_s": round(base_s, 1), "add_s": round(add_s, 2),
                "repack_s": round(repack_s, 1), "ratio": round(add_s / repack_s, 4)})
            remove_store(store)
            remove_store(store + ".repack")
        shutil.rmtree(tree, ignore_errors=True)

    if a.scale_store:
        rocks = os.path.join(scale_dir, "converted.rocksdb.dsfs")
        remove_store(rocks)
        t0 = time.perf_counter()
        r = sh([dsfs, "convert", a.scale_store, rocks, "--backend", "rocksdb"], timeout=3600)
        if r.returncode != 0:
            raise SystemExit(f"convert: {r.stderr.strip()}")
        convert_s = time.perf_counter() - t0
        v = sh([dsfs, "info", "--json", a.scale_store])
        files = json.loads(v.stdout).get("files") if v.returncode == 0 else None
        for backend, store in (("lmdb", a.scale_store), ("rocksdb", rocks)):
            mounts, rss = [], []
            for _ in range(3):
                drop_caches()
                t0 = time.perf_counter()
                with Mount(dsfs, store, mnt):
                    mounts.append(time.perf_counter() - t0)
                    rss.append(daemon_rss_kb(store))
            rec("convert", f"{backend}_mount", {"files": files, "convert_s": round(convert_s, 1),
                                                "mount_s": [round(x, 3) for x in mounts],
                                                "rss_kb": rss})
        remove_store(rocks)

    lines = [f"# dsfs backends side by side: LMDB vs RocksDB, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, kernel {platform.release()}; dsfs {dsfs} {a.desc}",
             "- reads: dsfs-readbench over the same shuffled list of every file; cold = one pass "
             "after drop_caches and a fresh mount; hot = the third pass", ""]
    for ds in a.datasets:
        r = res[ds]
        lines += [f"## {ds}", "", "| | LMDB | RocksDB | RocksDB / LMDB |", "|---|---|---|---|"]

        def row(label, key, field, fmt="{:,.0f}"):
            x, y = r[f"lmdb_{key}"][field], r[f"rocksdb_{key}"][field]
            lines.append(f"| {label} | {fmt.format(x)} | {fmt.format(y)} | {y / x:.2f}x |")

        row("pack s", "pack", "seconds", "{:.1f}")
        row("store bytes", "pack", "bytes")
        row("mount s", "reads", "mount_s", "{:.3f}")
        row("first touch files/s, 4 threads", "reads", "cold_4t")
        row("first touch files/s, 1 thread", "reads", "cold_1t")
        row("hot files/s, 1 thread", "reads", "hot_1t")
        row("hot files/s, 4 threads", "reads", "hot_4t")
        row("ImageFolder images/s, epoch 1", "imagefolder", "epoch1")
        row("ImageFolder images/s, epoch 2", "imagefolder", "epoch2")
        row("add 1% more files, s", "add", "add_s", "{:.2f}")
        row("repack of the grown tree, s", "add", "repack_s", "{:.1f}")
        row("add / repack", "add", "ratio", "{:.3f}")
        lines.append("")
    if "scale" in res:
        x, y = res["scale"]["lmdb_scale"], res["scale"]["rocksdb_scale"]
        lines += [f"## {x['files']:,} files (dsfs-gentar stream)", "",
                  "| | LMDB | RocksDB | RocksDB / LMDB |", "|---|---|---|---|"]
        for label, key, fmt in (("pack s (`dsfs-gentar \\| dsfs pack -`)", "pack_s", "{:.1f}"),
                                ("store bytes", "bytes", "{:,}"),
                                ("mount s", "mount_s", "{:.3f}"),
                                ("daemon RSS after mount, kB", "rss_kb", "{:,}"),
                                ("lstat 100,000 random paths, files/s, 4 threads, cold",
                                 "stat_cold_4t", "{:,.0f}"),
                                ("the same, hot", "stat_hot_4t", "{:,.0f}")):
            lines.append(f"| {label} | {fmt.format(x[key])} | {fmt.format(y[key])} | "
                         f"{y[key] / x[key]:.2f}x |")
        lines.append("")
    if "add" in res:
        x, y = res["add"]["lmdb_add_at_scale"], res["add"]["rocksdb_add_at_scale"]
        lines += [f"## add {x['added_files']:,} files to a {x['base_files']:,}-file store", "",
                  "| | LMDB | RocksDB |", "|---|---|---|"]
        for label, key, fmt in (("pack of the base store s", "pack_base_s", "{:.1f}"),
                                ("`dsfs add` s", "add_s", "{:.2f}"),
                                ("files in the store after add", "files_after", "{:,}"),
                                ("full repack of base + added s", "repack_s", "{:.1f}"),
                                ("add / repack", "ratio", "{:.4f}")):
            lines.append(f"| {label} | {fmt.format(x[key])} | {fmt.format(y[key])} |")
        lines.append("")
    if "convert" in res:
        x, y = res["convert"]["lmdb_mount"], res["convert"]["rocksdb_mount"]
        med = lambda v: sorted(v)[len(v) // 2]
        lines += [f"## mount of a {x['files']:,}-file store and of its `dsfs convert` to RocksDB",
                  "", f"- convert: {y['convert_s']} s", "",
                  "| | LMDB | RocksDB |", "|---|---|---|",
                  f"| mount s after drop_caches (median of 3; all) | {med(x['mount_s']):.3f} "
                  f"({', '.join(map(str, x['mount_s']))}) | {med(y['mount_s']):.3f} "
                  f"({', '.join(map(str, y['mount_s']))}) |",
                  f"| daemon RSS after mount, kB | {med(x['rss_kb']):,} | {med(y['rss_kb']):,} |", ""]
    lines.append("Raw figures: the .jsonl beside this file; command: `bench/backend_bench.py`.\n")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    # The charts of these results and the README's (bench/lib/plot.py), beside them.
    subprocess.run(["/usr/bin/python3", os.path.join(LIB, "plot.py"), out + ".jsonl"],
                   check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
