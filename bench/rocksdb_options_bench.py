#!/usr/bin/python3
"""RocksDB store settings measured side by side (issue 5: "settings chosen by measurement").

  /usr/bin/python3 bench/rocksdb_options_bench.py [--dsfs BUILD/dsfs]
      [--tuned-pack BUILD/bench/dsfs-tuned-pack] [--readbench BUILD/bench/dsfs-readbench]
      [--work /var/tmp/dsfs-bench] [--dataset photo32]
      [--rounds 3]

For each table layout (KvWriterOptions::RocksdbLayout, see backend/kv_open.h; the first row is
dsfs's default): `dsfs-tuned-pack` of the core benchmark's tree into a RocksDB store (time,
store size; with the default layout it writes what `dsfs pack --backend rocksdb` writes), then
shuffled open+read+close of every file, mounted by the shipped dsfs, with dsfs-readbench:
  - cold: after drop_caches and a fresh mount (4 threads, then 1 thread after another drop);
  - store warm: a fresh mount with the store's pages still in the page cache, so every read
    reaches the daemon and the backend's own read path (memory map, block cache, block
    decompression) is what differs (1 thread);
and the daemon's RSS after the cold 4-thread pass. The settings take turns, ROUNDS times, and
the table shows each figure's median over the rounds (a drift of the machine hits all alike).
(Reading through a RocksDB block cache instead of the memory map, a reader setting, was
measured until 2026-12 with a knob since removed from dsfs:
bench/results/backends/rocksdb-options-*.md before that date.)
Writes bench/results/backends/rocksdb-options-<date>.md
and .jsonl. Mounts only under WORK/mnt.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import (READBENCH, REPO, Mount, daemon_rss_kb, drop_caches, readbench,  # noqa: E402
                        results_dir, sh)

SETTINGS = [
    ("default: 4 KiB blocks, no bloom filter, no RocksDB compression, mmap reads, no block cache", ""),
    ("16 KiB blocks", "block_size=16384"),
    ("64 KiB blocks", "block_size=65536"),
    ("bloom filter, 10 bits/key", "bloom_bits=10"),
    ("RocksDB zstd block compression", "compression=zstd"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--tuned-pack", default=os.path.join(REPO, "build", "bench", "dsfs-tuned-pack"))
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--dataset", default="photo32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    a = ap.parse_args()
    dsfs, rb = os.path.abspath(a.dsfs), os.path.abspath(a.readbench)
    src = os.path.join(a.work, a.dataset)
    lst = os.path.join(a.work, a.dataset + ".list")
    if not os.path.isdir(src):
        raise SystemExit(f"{src} missing: run bench/core_bench.sh once (it builds the trees)")
    if not os.path.exists(lst):
        sh([rb, src, "--write-list", lst])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("backends"), f"rocksdb-options-{stamp}")
    mnt = os.path.join(a.work, "mnt", "rocksdb-options")
    store = os.path.join(a.work, f"{a.dataset}.rocksdb-options.dsfs")
    runs = {}
    with open(out + ".jsonl", "w") as jsonl:
        for rnd in range(1, a.rounds + 1):
            for label, tuning in SETTINGS:
                shutil.rmtree(store, ignore_errors=True)
                drop_caches()
                t0 = time.perf_counter()
                r = sh([os.path.abspath(a.tuned_pack), src, store] + ([tuning] if tuning else []))
                if r.returncode != 0:
                    raise SystemExit(f"pack ({tuning}): {r.stderr.strip()[-300:]}")
                row = {"round": rnd, "label": label, "tuning": tuning,
                       "pack_s": round(time.perf_counter() - t0, 2),
                       "bytes": int(sh(["du", "-sb", store]).stdout.split()[0])}
                drop_caches()
                with Mount(dsfs, store, mnt):
                    row["cold_4t"] = readbench(rb, mnt, lst, 4, 1)[0]["files_per_s"]
                    row["rss_kb"] = daemon_rss_kb(store) or 0
                drop_caches()
                with Mount(dsfs, store, mnt):
                    row["cold_1t"] = readbench(rb, mnt, lst, 1, 1)[0]["files_per_s"]
                with Mount(dsfs, store, mnt):  # the store's pages are in the page cache now
                    row["warm_1t"] = readbench(rb, mnt, lst, 1, 1)[0]["files_per_s"]
                runs.setdefault(label, []).append(row)
                jsonl.write(json.dumps(row) + "\n")
                jsonl.flush()
                print(f"[{time.strftime('%H:%M:%S')}] {row}", flush=True)
    shutil.rmtree(store, ignore_errors=True)
    rows = []
    for label, tuning in SETTINGS:
        rs = runs[label]
        rows.append({"label": label, "tuning": tuning,
                     **{k: statistics.median(r[k] for r in rs)
                        for k in ("pack_s", "bytes", "cold_4t", "cold_1t", "warm_1t", "rss_kb")}})

    base = rows[0]
    lines = [f"# RocksDB store settings side by side ({a.dataset}), {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, kernel {platform.release()}; dsfs {dsfs} {a.desc}",
             f"- data: {a.dataset} ({src}); reads: dsfs-readbench, shuffled open+read+close of "
             "every file; cold = after drop_caches and a fresh mount; store warm = a fresh mount "
             "with the store in the page cache (every read reaches the daemon)",
             f"- medians of {a.rounds} interleaved rounds; ratios against the first row "
             "(dsfs's default)", "",
             "| setting | pack s | store MB | cold files/s 4 threads | cold 1 thread | "
             "store warm 1 thread | daemon RSS MB |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        def cell(key, fmt="{:,.0f}"):
            v = fmt.format(r[key])
            return v if r is base else f"{v} ({r[key] / base[key]:.2f}x)"
        lines.append(f"| {r['label']} (`{r['tuning'] or '-'}`) | {cell('pack_s', '{:.1f}')} | "
                     f"{r['bytes'] / 1e6:.1f} ({r['bytes'] / base['bytes']:.3f}x) | "
                     f"{cell('cold_4t')} | {cell('cold_1t')} | {cell('warm_1t')} | "
                     f"{(r['rss_kb'] or 0) / 1024:.1f} |")
    lines += ["", "Raw figures: the .jsonl beside this file; command: "
              "`bench/rocksdb_options_bench.py`.", ""]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
