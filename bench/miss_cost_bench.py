#!/usr/bin/python3
"""What a RAM-cache miss costs: stores packed at several group sizes, read at random through a
RAM cache far smaller than the data (issue 29 point 3).

  /usr/bin/python3 bench/miss_cost_bench.py --src TREE [--work /var/tmp/dsfs-bench/miss]
      [--memory-limit 96M]
      [--group-sizes 128K,32K,16K,4K,1K] [--cache-size 8M] [--threads 2] [--passes 3]
      [--pack-binary BUILD/dsfs] [--readbench BUILD/bench/dsfs-readbench]
      --variant LABEL=DSFS_BINARY [--variant ...]

Packs TREE once per group size (with --pack-binary, default the first variant's binary), and
prints each store's size beside `mksquashfs TREE IMG -comp zstd`. Then, for ext4 (TREE itself)
and for each variant binary on each store: drop_caches, a fresh mount with -o cache_size=SIZE,
and PASSES shuffled passes of open+read+close over every file with dsfs-readbench (THREADS
threads), all of it in a memory cgroup of --memory-limit (the files' page cache is charged to
it, as in a container: set it below the tree's page-cache footprint). Variants run on the same stores in the same run, so a before/after binary pair is
compared on equal terms. Writes bench/results/miss-cost/miss-cost-<date>.md and .jsonl.
"""
import argparse
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import READBENCH, Mount, drop_caches, readbench, results_dir, sh  # noqa: E402


def du_bytes(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def enter_cgroup(limit):
    """Moves this process (and so every child: mounts, readers) into a fresh memory cgroup."""
    cg = "/sys/fs/cgroup/memory/dsfs-miss-cost-bench"
    os.makedirs(cg, exist_ok=True)
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    n = int(limit[:-1]) * mult[limit[-1]] if limit[-1] in mult else int(limit)
    with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(n))
    with open(os.path.join(cg, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def passes(rb, root, lst, threads, n):
    rows = readbench(rb, root, lst, threads, n, timeout=3600)
    if len(rows) != n or any(x["errors"] for x in rows):
        raise RuntimeError(f"readbench {root}: {rows}")
    return [x["files_per_s"] for x in rows]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--work", default="/var/tmp/dsfs-bench/miss")
    ap.add_argument("--group-sizes", default="128K,32K,16K,4K,1K")
    ap.add_argument("--cache-size", default="8M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--pack-binary")
    ap.add_argument("--pack-args", default="", help="extra dsfs pack arguments, space-separated")
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--variant", action="append", required=True)
    ap.add_argument("--no-ext4", action="store_true")
    ap.add_argument("--memory-limit", default="96M",
                    help="a cgroup v1 memory limit for this script, the mounts and the reads "
                         "(the page cache of the files is charged to it); 0: none")
    a = ap.parse_args()
    src = os.path.abspath(a.src)
    os.makedirs(a.work, exist_ok=True)
    variants = []
    for v in a.variant:
        label, binary = v.split("=", 1)
        variants.append((label, os.path.abspath(binary)))
    pack_bin = os.path.abspath(a.pack_binary or variants[0][1])
    lst = os.path.join(a.work, "files.list")
    sh([a.readbench, src, "--write-list", lst])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("miss-cost"), f"miss-cost-{stamp}")
    jsonl = open(out + ".jsonl", "w")

    def emit(row):
        jsonl.write(json.dumps(row) + "\n")
        jsonl.flush()
        print(f"[{time.strftime('%H:%M:%S')}] {row}", flush=True)

    raw = du_bytes(src)
    sq = os.path.join(a.work, "tree.sqfs")
    if not os.path.exists(sq):
        sh(["mksquashfs", src, sq, "-comp", "zstd", "-noappend", "-quiet", "-no-progress"])
    sizes = {"squashfs": os.path.getsize(sq)}
    emit({"kind": "size", "store": "squashfs -comp zstd", "bytes": sizes["squashfs"], "raw": raw})
    stores = []
    for gs in a.group_sizes.split(","):
        st = os.path.join(a.work, f"g{gs}.dsfs")
        if not os.path.exists(st):
            r = sh([pack_bin, "pack", src, st, "--group-size", gs, *a.pack_args.split()],
                   timeout=3600)
            if r.returncode != 0:
                raise RuntimeError(f"pack {gs}: {r.stderr.strip()[-300:]}")
        sizes[gs] = du_bytes(st)
        stores.append((gs, st))
        emit({"kind": "size", "store": f"dsfs --group-size {gs}", "bytes": sizes[gs], "raw": raw,
              "vs_squashfs": sizes[gs] / sizes["squashfs"]})
    # Only the reads run in the cgroup (mksquashfs and pack need more memory than it allows).
    if a.memory_limit != "0":
        enter_cgroup(a.memory_limit)
    reads = {}
    if not a.no_ext4:
        drop_caches()
        reads[("ext4", "-")] = passes(a.readbench, src, lst, a.threads, a.passes)
        emit({"kind": "read", "variant": "ext4", "files_per_s": reads[("ext4", "-")]})
    mnt = os.path.join(a.work, "mnt")
    for gs, st in stores:
        for label, binary in variants:
            drop_caches()
            with Mount(binary, st, mnt, ["-o", f"cache_size={a.cache_size}"]) as m:
                rates = passes(a.readbench, mnt, lst, a.threads, a.passes)
                try:
                    stats = m.stats()
                except Exception:  # noqa: BLE001
                    stats = {}
            reads[(label, gs)] = rates
            emit({"kind": "read", "variant": label, "group_size": gs, "files_per_s": rates,
                  "decode": stats.get("decode") or stats.get("store", {})})
    jsonl.close()
    files = sum(1 for _ in open(lst))
    lines = [f"# Miss cost: random reads through a small RAM cache, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, kernel {platform.release()}; tree: {src} "
             f"({files} files, {raw / 1e6:.1f} MB of bytes)",
             f"- memory cgroup (v1) limit for the mount daemon and the reader: {a.memory_limit}",
             f"- reads: drop_caches, fresh mount `-o cache_size={a.cache_size}`, {a.passes} shuffled "
             f"passes of open+read+close over every file, {a.threads} threads (dsfs-readbench)",
             "- variants: " + "; ".join(f"{l} = {b}" for l, b in variants), "",
             "| store | bytes | vs squashfs |", "|---|---|---|",
             f"| squashfs -comp zstd | {sizes['squashfs']:,} | 1.00x |"]
    for gs, _ in stores:
        lines.append(f"| dsfs --group-size {gs} | {sizes[gs]:,} | "
                     f"{sizes[gs] / sizes['squashfs']:.3f}x |")
    lines += ["", "| reader | group size | files/s, passes 1..N |", "|---|---|---|"]
    for (label, gs), v in reads.items():
        lines.append(f"| {label} | {gs} | {', '.join(f'{x:,.0f}' for x in v)} |")
    lines += ["", "Raw figures: the .jsonl beside this file; command: `bench/miss_cost_bench.py`.", ""]
    with open(out + ".md", "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
