#!/usr/bin/python3
"""Store size and pack time against mksquashfs, side by side (issue 17: "to or below
`mksquashfs -comp zstd` size").

  /usr/bin/python3 bench/store_size_bench.py [--dsfs BUILD/dsfs] [--baseline OLD_DSFS]
      [--work /var/tmp/dsfs-bench] [--datasets fmnist_20000,photo32-20000,fmnist,photo32]
      [--rounds 1]

For each dataset tree under WORK: `dsfs pack` with its defaults (and, with --baseline, the
same with another dsfs binary, e.g. one from before a format change), and
`mksquashfs SRC IMG -comp zstd -noappend -quiet -no-progress` (its defaults: 128 KiB blocks,
zstd level 15), one after the other, ROUNDS times (sizes do not vary; pack times are medians).
Reports each store's size on disk, its ratio to the squashfs image, the store's own breakdown
(`dsfs info --json`: payloads, metadata, dictionary) and the pack times. Writes
bench/results/store-size/store-size-<date>.md and .jsonl. Stores and images go to
WORK/size-bench and are removed at the end.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--baseline", default="", help="another dsfs binary to pack with too")
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--datasets", default="fmnist_20000,photo32-20000,fmnist,photo32")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    a = ap.parse_args()
    out_dir = os.path.join(a.work, "size-bench")
    os.makedirs(out_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = os.path.join(REPO, "bench", "results", "store-size")
    os.makedirs(results, exist_ok=True)
    rows = []
    packers = [("dsfs", os.path.abspath(a.dsfs))]
    if a.baseline:
        packers.append(("dsfs (baseline)", os.path.abspath(a.baseline)))
    for name in a.datasets.split(","):
        src = os.path.join(a.work, name)
        if not os.path.isdir(src):
            sys.exit(f"store_size_bench: no dataset tree {src} (bench/lib/datasets.py makes them)")
        times = {}
        sizes = {}
        info = {}
        for r in range(a.rounds):
            for label, binary in packers:
                store = os.path.join(out_dir, f"{name}.{len(times)}.dsfs")
                t = timed([binary, "pack", "-q", "--force", src, store])
                times.setdefault(label, []).append(t)
                sizes[label] = os.path.getsize(store)
                j = subprocess.run([a.dsfs, "info", "--json", store], check=True,
                                   capture_output=True, text=True).stdout
                info[label] = json.loads(j)
                os.remove(store)
            img = os.path.join(out_dir, f"{name}.sqfs")
            t = timed(["mksquashfs", src, img, "-comp", "zstd", "-noappend", "-quiet",
                       "-no-progress"])
            times.setdefault("mksquashfs", []).append(t)
            sizes["mksquashfs"] = os.path.getsize(img)
            os.remove(img)
        for label in list(sizes):
            row = {"dataset": name, "packer": label, "bytes": sizes[label],
                   "ratio_to_squashfs": round(sizes[label] / sizes["mksquashfs"], 4),
                   "pack_s": round(statistics.median(times[label]), 2)}
            if label in info:
                i = info[label]
                row.update({k: i.get(k) for k in ("format_version", "files", "payload_bytes",
                                                 "metadata_bytes", "dictionary_bytes",
                                                 "group_bytes")})
            rows.append(row)
            print(json.dumps(row), flush=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    with open(os.path.join(results, f"store-size-{stamp}.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    with open(os.path.join(results, f"store-size-{stamp}.md"), "w") as f:
        f.write(f"# Store size against mksquashfs, {stamp}\n\n")
        f.write(f"`{' '.join(sys.argv)}`; {a.desc or 'build: ' + a.dsfs}. Machine: "
                f"{platform.node()}, {os.cpu_count()} CPUs, {platform.release()}. mksquashfs "
                "`-comp zstd` with its defaults (128 KiB blocks, level 15); dsfs pack with "
                "its defaults (LMDB). Pack times: medians of the rounds, on a shared VM.\n\n")
        f.write("| dataset | packer | format | bytes | ratio to squashfs | payloads | metadata "
                "| dictionary | pack (s) |\n|---|---|---|---|---|---|---|---|---|\n")
        def n(v):
            return f"{v:,}" if isinstance(v, int) else "—"
        for r in rows:
            f.write(f"| {r['dataset']} | {r['packer']} | {r.get('format_version', '—')} | "
                    f"{r['bytes']:,} | {r['ratio_to_squashfs']:.4f} | "
                    f"{n(r.get('payload_bytes'))} | {n(r.get('metadata_bytes'))} | "
                    f"{n(r.get('dictionary_bytes'))} | {r['pack_s']} |\n")
    print(f"wrote bench/results/store-size/store-size-{stamp}.md")


if __name__ == "__main__":
    main()
