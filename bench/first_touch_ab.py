#!/usr/bin/python3
"""First-touch reads, dsfs variants against ext4, interleaved round by round (A/B bisection).

  /usr/bin/python3 bench/first_touch_ab.py [--work /var/tmp/dsfs-bench] [--dataset photo32]
      [--rounds 3] [--limit 50000] [--threads 4] [--readbench BUILD/bench/dsfs-readbench]
      --variant LABEL=DSFS_BINARY[:MOUNT_OPTIONS][@STORE] [--variant ...]

The core benchmark's first-touch measurement (bench/core_bench.sh: drop_caches, a fresh mount,
optionally `find` over the tree, then one shuffled pass over the first LIMIT files of the list
with dsfs-readbench), for ext4 and each variant in turn, ROUNDS times interleaved so that a
drift of the machine hits every variant alike. Each variant mounts its STORE (default: the core
benchmark's WORK/DATASET.dsfs) with its own binary and options. Prints and writes
bench/results/first-touch/first-touch-ab-<date>.md (medians and every round) and .jsonl.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import READBENCH, Mount, drop_caches, readbench, results_dir, sh  # noqa: E402


def read_pass(rb, root, lst, threads, limit):
    rows = readbench(rb, root, lst, threads, 1, "--limit", str(limit))
    if rows[0]["errors"]:
        raise RuntimeError(f"readbench {root}: {rows}")
    return rows[0]["files_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--dataset", default="photo32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=50000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--variant", action="append", required=True)
    a = ap.parse_args()
    src = os.path.join(a.work, a.dataset)
    lst = os.path.join(a.work, a.dataset + ".list")
    store = os.path.join(a.work, a.dataset + ".dsfs")
    mnt = os.path.join(a.work, "mnt", "first-touch-ab")
    variants = [("ext4", None, [], src)]
    for v in a.variant:
        label, rest = v.split("=", 1)
        rest, _, vstore = rest.partition("@")
        binary, _, opts = rest.partition(":")
        variants.append((label, os.path.abspath(binary), ["-o", opts] if opts else [],
                         vstore or store))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("first-touch"), f"first-touch-ab-{stamp}")
    res = {}
    with open(out + ".jsonl", "w") as jsonl:
        for rnd in range(1, a.rounds + 1):
            for label, binary, opts, vstore in variants:
                for find in (True, False):
                    drop_caches()
                    if binary is None:
                        if find:
                            sh(["find", src])
                        rate = read_pass(a.readbench, src, lst, a.threads, a.limit)
                    else:
                        with Mount(binary, vstore, mnt, opts):
                            if find:
                                sh(["find", mnt])
                            rate = read_pass(a.readbench, mnt, lst, a.threads, a.limit)
                    key = (label, "find" if find else "no find")
                    res.setdefault(key, []).append(rate)
                    row = {"round": rnd, "variant": label, "find": find, "files_per_s": rate}
                    jsonl.write(json.dumps(row) + "\n")
                    jsonl.flush()
                    print(f"[{time.strftime('%H:%M:%S')}] {row}", flush=True)
    lines = [f"# First touch, dsfs variants vs ext4, interleaved, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, kernel {platform.release()}; data: {a.dataset}; "
             f"{a.threads} threads, the first {a.limit} files of the shuffled "
             f"list; {a.rounds} rounds",
             "- variants: " + "; ".join(f"{l} = {b or 'the source tree'} {' '.join(o)} {st}"
                                         for l, b, o, st in variants), "",
             "| variant | find first | median files/s | vs ext4 | every round |", "|---|---|---|---|---|"]
    for label, *_ in variants:
        for f in ("find", "no find"):
            v = res[(label, f)]
            e = statistics.median(res[("ext4", f)])
            lines.append(f"| {label} | {f} | {statistics.median(v):,.0f} | "
                         f"{statistics.median(v) / e:.2f}x | {', '.join(f'{x:,.0f}' for x in v)} |")
    lines += ["", "Raw figures: the .jsonl beside this file; command: `bench/first_touch_ab.py`.", ""]
    with open(out + ".md", "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
