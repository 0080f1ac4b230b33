#!/usr/bin/python3
"""`dsfs warmup` of a store in S3 (Ceph RGW) on another node, then an epoch (issue 32 point 3).

  /usr/bin/python3 bench/warmup_bench.py [--dsfs BUILD/dsfs] [--src TREE] [--files 8000]
                                         [--file-kb 40] [--work /var/tmp/dsfs-warmup-bench]
                                         [--delay-ms 1] [-j 8] [--rounds 2]

Starts its own single-host Ceph cluster and another node (a network namespace reaching the
gateway --delay-ms away each way), as bench/s3_bench.py does (bench/lib/s3_node.py). Packs TREE
(default: a tree made here of --files files of random bytes, --file-kb KB each, in 100
directories: nothing to download) into an LMDB store and times `dsfs push` to s3://bench/ds from the node.
Then, --rounds times: mounts s3://bench/ds on the node with an empty disk cache after
drop_caches, times `dsfs warmup MNT -j N` (its GETs and bytes from the mount's stats), reads
every file (an epoch, after drop_caches) and counts the GETs the epoch made, unmounts, mounts
again over the same disk cache (RAM cache gone) and reads every file again (GETs counted).
Target: zero GETs in both epochs; the warm-up's throughput against push's. Writes
bench/results/warmup/warmup-<date>.md and .jsonl. Mounts only under WORK/mnt.
"""
import argparse
import json
import os
import platform
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import REPO, Mount, drop_caches, results_dir  # noqa: E402
from s3_node import Node, NodeMount, create_bucket, start_ceph, stop_ceph, timed  # noqa: E402


def make_tree(root, files, file_kb):
    rng = random.Random(32)
    for i in range(files):
        d = os.path.join(root, f"class_{i % 100:03d}")
        os.makedirs(d, exist_ok=True)
        size = max(1, int(file_kb * 1024 * rng.uniform(0.5, 1.5)))
        with open(os.path.join(d, f"img_{i:07d}.bin"), "wb") as f:
            f.write(rng.randbytes(size))


def epoch(mnt):
    """Reads every file under mnt (not .dsfs); (files, bytes, seconds)."""
    t0 = time.monotonic()
    n = total = 0
    for dirpath, dirnames, filenames in os.walk(mnt):
        if dirpath == mnt and ".dsfs" in dirnames:
            dirnames.remove(".dsfs")
        dirnames.sort()
        for name in sorted(filenames):
            with open(os.path.join(dirpath, name), "rb") as f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    total += len(b)
            n += 1
    return n, total, time.monotonic() - t0


def backend(m):
    b = m.stats().get("backend", {})
    return {k: b.get(k, 0) for k in ("remote_gets", "remote_get_bytes", "disk_cache_hits",
                                     "disk_cache_misses")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--src", default="")
    ap.add_argument("--files", type=int, default=8000)
    ap.add_argument("--file-kb", type=int, default=40)
    ap.add_argument("--work", default="/var/tmp/dsfs-warmup-bench")
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("-j", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    src = a.src
    if not src:
        src = os.path.join(a.work, "src")
        make_tree(src, a.files, a.file_kb)
    ceph_dir = os.path.join(a.work, "ceph")
    try:
        fields, ceph_start_s = start_ceph(ceph_dir)
    except RuntimeError as e:
        sys.exit(f"warmup_bench: {e}")
    rows = []
    node = None
    try:
        if a.delay_ms > 0:
            node = Node(fields["endpoint"].rsplit(":", 1)[1], a.delay_ms).__enter__()
        create_bucket(fields, "bench")
        store = os.path.join(a.work, "ds.dsfs")
        pack_s, _ = timed([a.dsfs, "pack", "-q", src, store])
        store_bytes = os.path.getsize(store)
        # From the node too: both directions cross the same delay.
        push = [a.dsfs, "push", "-q", store, "s3://bench/ds"]
        push_s, _ = timed(node.argv(push) if node else push)
        rows.append({"what": "push", "store_bytes": store_bytes, "seconds": round(push_s, 3),
                     "mb_per_s": round(store_bytes / push_s / 1e6, 1), "pack_s": round(pack_s, 3),
                     "ceph_start_s": round(ceph_start_s, 2)})
        print(json.dumps(rows[-1]), flush=True)
        mnt = os.path.join(a.work, "mnt")
        cache = os.path.join(a.work, "cache")
        opts = ["-o", f"cache_dir={cache}"]

        def mount():
            if node:
                return NodeMount(node, a.dsfs, "s3://bench/ds", mnt, opts)
            return Mount(a.dsfs, "s3://bench/ds", mnt, opts)

        for rnd in range(a.rounds):
            shutil.rmtree(cache, ignore_errors=True)
            drop_caches()
            with mount() as m:
                before = backend(m)
                warm_s, r = timed([a.dsfs, "warmup", mnt, "-j", str(a.j)])
                after = backend(m)
                drop_caches()
                files, nbytes, epoch_s = epoch(mnt)
                after_epoch = backend(m)
            drop_caches()
            with mount() as m:
                at_mount = backend(m)
                _, _, remount_s = epoch(mnt)
                after_remount = backend(m)
            row = {"what": "warmup", "round": rnd, "jobs": a.j, "files": files, "bytes": nbytes,
                   "warmup_s": round(warm_s, 3),
                   "warmup_mb_per_s": round(store_bytes / warm_s / 1e6, 1),
                   "warmup_summary": r.stdout.strip(),
                   "warmup_gets": after["remote_gets"] - before["remote_gets"],
                   "warmup_get_bytes": after["remote_get_bytes"] - before["remote_get_bytes"],
                   "epoch_s": round(epoch_s, 3),
                   "epoch_gets": after_epoch["remote_gets"] - after["remote_gets"],
                   "remount_epoch_s": round(remount_s, 3),
                   "remount_epoch_gets": after_remount["remote_gets"] - at_mount["remote_gets"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if node:
            node.__exit__(None, None, None)
        stop_ceph(ceph_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("warmup"), f"warmup-{stamp}")
    with open(out + ".jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    p = rows[0]
    delay = (f"The mounts ran in a network namespace of their own, reaching the gateway through "
             f"{node.how}." if node else "No network delay (both on 127.0.0.1).")
    with open(out + ".md", "w") as f:
        f.write(f"# dsfs warmup from S3 (Ceph RGW), then an epoch, {stamp}\n\n")
        f.write(f"Host: {platform.node()}, {os.cpu_count()} cores. Tree: "
                f"{a.src or f'{a.files} files of random bytes, ~{a.file_kb} KB each, 100 directories'}. "
                f"{delay}\n\n")
        f.write(f"Store {p['store_bytes'] / 1e6:.1f} MB; push (from the same node) {p['seconds']} s "
                f"({p['mb_per_s']} MB/s).\n\n")
        f.write("Each round: an empty disk cache, drop_caches, mount, `dsfs warmup -j N`; an epoch "
                "over every file after drop_caches (same mount); unmount, mount again over the same "
                "disk cache, drop_caches, an epoch (RAM cache empty).\n\n"
                "| round | warm-up s | warm-up MB/s | vs push | GETs | GET MB | epoch s | epoch GETs "
                "| epoch after remount s | its GETs |\n|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows[1:]:
            f.write(f"| {r['round']} | {r['warmup_s']} | {r['warmup_mb_per_s']} | "
                    f"{r['warmup_mb_per_s'] / p['mb_per_s']:.2f}x | {r['warmup_gets']} | "
                    f"{r['warmup_get_bytes'] / 1e6:.1f} | {r['epoch_s']} | {r['epoch_gets']} | "
                    f"{r['remount_epoch_s']} | {r['remount_epoch_gets']} |\n")
        f.write(f"\nThe warm-up's own summary (last round): `{rows[-1]['warmup_summary']}`\n")
    print(f"wrote {out}.md", flush=True)


if __name__ == "__main__":
    main()
