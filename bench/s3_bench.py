#!/usr/bin/python3
"""A store read from S3 object storage (Ceph RGW) against the same store on local disk (issue 17).

  /usr/bin/python3 bench/s3_bench.py [--dsfs BUILD/dsfs] [--src TREE] [--work /var/tmp/dsfs-s3-bench]
                                     [--subset 20000] [--rounds 3] [--delay-ms 1]
                                     [--scale-files N] [--scale-store STORE] [--scale-only]

Starts its own single-host Ceph cluster (tests/support/ceph_rgw.sh, 127.0.0.1, memstore) and
stops it at the end. Packs TREE (default: the core benchmark's fmnist_20000 ImageFolder tree,
built by bench/lib/datasets.py) into an LMDB store, times `dsfs push` to s3://bench/ds, then runs
an unmodified torchvision ImageFolder + DataLoader (bench/lib/imagefolder_read.py: 2 workers,
batch 256, --subset images, epochs 1 and 2) over
  local    the store on local disk, mounted after drop_caches
  s3-cold  s3://bench/ds with an empty disk cache, after drop_caches
  s3-warm  s3://bench/ds mounted again after drop_caches, its disk cache kept from s3-cold
in turn (local last in odd rounds), --rounds times, and records mount times and the mount's GET count and bytes
(.dsfs/stats "backend"); the table has the medians over the rounds.
The S3 mounts run in a network namespace of their own (another node): their daemon reaches the
gateway through tests/support/netns_proxy.py on the namespace's loopback, --delay-ms away each way (a
`tc netem` delay where the kernel has sch_netem, else the relay's own delay line). --delay-ms 0:
no namespace, the gateway straight on 127.0.0.1.
--scale-files N (e.g. 1000000): a store of N files from `dsfs-gentar --files N | dsfs pack -`,
pushed, then `dsfs mount s3://...` with an empty disk cache, 3 times (time until the mount
answers, a stat and a listing of the root; daemon RSS after); then, still mounted, the time to
list one class directory and stat a file in it (the segments that takes are fetched then).
--scale-store STORE: that store (already packed) instead of packing one; --scale-only: only the
scale runs (no ImageFolder epochs). Writes bench/results/s3/s3-<date>.md and .jsonl. Mounts only
under WORK/mnt.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import REPO, Mount, drop_caches, imagefolder, results_dir, sh  # noqa: E402
from s3_node import Node, NodeMount, create_bucket, start_ceph, stop_ceph, timed  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--src", default="/var/tmp/dsfs-bench/fmnist_20000")
    ap.add_argument("--work", default="/var/tmp/dsfs-s3-bench")
    ap.add_argument("--subset", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=1.0)
    ap.add_argument("--scale-files", type=int, default=0)
    ap.add_argument("--gentar", default=os.path.join(REPO, "build", "bench", "dsfs-gentar"))
    ap.add_argument("--scale-store", default="")
    ap.add_argument("--scale-only", action="store_true")
    a = ap.parse_args()
    if not os.path.isdir(a.src):
        sys.exit(f"s3_bench: {a.src} missing (bench/lib/datasets.py builds it)")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    ceph_dir = os.path.join(a.work, "ceph")
    try:
        fields, ceph_start_s = start_ceph(ceph_dir)
    except RuntimeError as e:
        sys.exit(f"s3_bench: {e}")
    env = dict(os.environ)
    rows = []
    node = None
    try:
        if a.delay_ms > 0:
            node = Node(fields["endpoint"].rsplit(":", 1)[1], a.delay_ms).__enter__()
        create_bucket(fields, "bench")
        store = os.path.join(a.work, "ds.dsfs")
        if a.scale_only:
            a.subset = 0
        pack_s, _ = timed([a.dsfs, "pack", "-q", a.src, store])
        store_bytes = os.path.getsize(store)
        push_s, _ = timed([a.dsfs, "push", "-q", store, "s3://bench/ds"], env=env)
        rows.append({"what": "push", "store_bytes": store_bytes, "seconds": round(push_s, 3),
                     "mb_per_s": round(store_bytes / push_s / 1e6, 1), "pack_s": round(pack_s, 3),
                     "ceph_start_s": round(ceph_start_s, 2)})
        print(json.dumps(rows[-1]), flush=True)
        mnt = os.path.join(a.work, "mnt")
        cache = os.path.join(a.work, "cache")
        runs = [("local", store, []),
                ("s3-cold", "s3://bench/ds", ["-o", f"cache_dir={cache}"]),
                ("s3-warm", "s3://bench/ds", ["-o", f"cache_dir={cache}"])]
        for rnd in range(a.rounds if not a.scale_only else 0):
            # Odd rounds read local last: a drift of the machine's speed over a round does not
            # always favour the same side.
            for label, source, opts in runs if rnd % 2 == 0 else runs[1:] + runs[:1]:
                if label == "s3-cold":
                    shutil.rmtree(cache, ignore_errors=True)
                drop_caches()
                t0 = time.monotonic()
                remote = source.startswith("s3://") and node
                with (NodeMount(node, a.dsfs, source, mnt, opts) if remote else
                      Mount(a.dsfs, source, mnt, opts)) as m:
                    mount_s = time.monotonic() - t0
                    res = imagefolder(mnt, a.subset, label)
                    backend = m.stats().get("backend", {})
                row = {"what": label, "round": rnd, "mount_s": round(mount_s, 3), **res, **backend}
                rows.append(row)
                print(json.dumps(row), flush=True)
        if a.scale_files:
            big = os.path.join(a.work, "scale.dsfs")
            t0 = time.monotonic()
            if a.scale_store:
                big = a.scale_store
                scale_pack_s = 0
            else:
                p = subprocess.run(f"{a.gentar} --files {a.scale_files} | {a.dsfs} pack -q - {big}",
                                   shell=True, stderr=subprocess.PIPE, text=True)
                if p.returncode != 0:
                    raise RuntimeError(f"scale pack: {p.stderr[-300:]}")
                scale_pack_s = time.monotonic() - t0
            info = json.loads(sh([a.dsfs, "info", "--json", big]).stdout or "{}")
            scale_push_s, _ = timed([a.dsfs, "push", "-q", big, "s3://bench/scale"], env=env)
            for i in range(3):
                shutil.rmtree(os.path.join(a.work, "scale-cache"), ignore_errors=True)
                drop_caches()
                t0 = time.monotonic()
                scale_opts = ["-o", f"cache_dir={os.path.join(a.work, 'scale-cache')}"]
                with (NodeMount(node, a.dsfs, "s3://bench/scale", mnt, scale_opts) if node else
                      Mount(a.dsfs, "s3://bench/scale", mnt, scale_opts)) as m:
                    top = os.listdir(mnt)
                    mount_s = time.monotonic() - t0
                    t1 = time.monotonic()
                    sub = os.path.join(mnt, sorted(top)[0])
                    while os.path.isdir(sub):
                        names = sorted(os.listdir(sub))
                        if not names:
                            break
                        sub = os.path.join(sub, names[len(names) // 2])
                    os.stat(sub)
                    dir_s = time.monotonic() - t1
                    rss_kb = None
                    for pid in sh(["pgrep", "-f", "dsfs mount s3://bench/scale"]).stdout.split():
                        with open(f"/proc/{pid}/status") as f:
                            rss_kb = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
                    backend = m.stats().get("backend", {})
                row = {"what": "scale-mount", "files": a.scale_files, "run": i,
                       "store_bytes": os.path.getsize(big), "pack_s": round(scale_pack_s, 1),
                       "push_s": round(scale_push_s, 2), "mount_s": round(mount_s, 3),
                       "first_dir_s": round(dir_s, 3),
                       "format_version": info.get("format_version"),
                       "metadata_bytes": info.get("metadata_bytes"),
                       "rss_mb": round(rss_kb / 1024, 1) if rss_kb else None, **backend}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        if node:
            node.__exit__(None, None, None)
        stop_ceph(ceph_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("s3"), f"s3-{stamp}")
    with open(out + ".jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    def median_row(label):
        rs = [r for r in rows if r["what"] == label]
        if not rs:
            return None
        m = dict(rs[-1])
        for k in ("mount_s", "epoch1", "epoch2"):
            m[k] = statistics.median(r[k] for r in rs)
        m["rounds"] = len(rs)
        m["epoch1_all"] = [r["epoch1"] for r in rs]
        m["epoch2_all"] = [r["epoch2"] for r in rs]
        return m

    local = median_row("local")
    delay = (f"The S3 mounts ran in a network namespace of their own, reaching the gateway "
             f"through {node.how}." if node else "No network delay (both on 127.0.0.1).")
    with open(out + ".md", "w") as f:
        f.write(f"# S3 (Ceph RGW) against local disk, {stamp}\n\n")
        f.write(f"Host: {platform.node()}, {os.cpu_count()} cores. Tree: {a.src}; "
                f"ImageFolder + DataLoader, 2 workers, batch 256, {a.subset} images per epoch. "
                f"{delay}\n\n")
        p = rows[0]
        f.write(f"Ceph serving after {p['ceph_start_s']} s. Store {p['store_bytes'] / 1e6:.1f} MB; "
                f"push {p['seconds']} s ({p['mb_per_s']} MB/s).\n\n")
        if local:
            f.write(f"Medians of {local['rounds']} rounds (local, s3-cold, s3-warm in turn, local last in odd "
                    "rounds; every "
                    "epoch 1 after drop_caches; GETs and disk cache counts of the last round).\n\n"
                    "| run | mount s | epoch 1 img/s | vs local | epoch 2 img/s | vs local | GETs | "
                    "GET MB | disk cache hits / misses | epoch 1, each round | epoch 2, each round |\n"
                    "|---|---|---|---|---|---|---|---|---|---|---|\n")
            for label in ("local", "s3-cold", "s3-warm"):
                r = median_row(label)
                f.write(f"| {label} | {r['mount_s']} | {r['epoch1']:.0f} | "
                        f"{r['epoch1'] / local['epoch1']:.2f}x | {r['epoch2']:.0f} | "
                        f"{r['epoch2'] / local['epoch2']:.2f}x | {r.get('remote_gets', '-')} | "
                        f"{r.get('remote_get_bytes', 0) / 1e6:.1f} | "
                        f"{r.get('disk_cache_hits', '-')} / {r.get('disk_cache_misses', '-')} | "
                        f"{', '.join(f'{x:.0f}' for x in r['epoch1_all'])} | "
                        f"{', '.join(f'{x:.0f}' for x in r['epoch2_all'])} |\n")
        scale = [r for r in rows if r["what"] == "scale-mount"]
        if scale:
            s0 = scale[0]
            f.write(f"\nA store of {s0['files']} files ({s0['store_bytes'] / 1e6:.0f} MB, packed in "
                    f"{s0['pack_s']} s, pushed in {s0['push_s']} s), mounted from S3 with an empty "
                    f"disk cache after drop_caches (until the root is listed; store format "
                    f"v{s0.get('format_version')}, metadata {s0.get('metadata_bytes') or 0:,} bytes "
                    "as stored); then one class directory listed and a file in it stat'ed. GETs "
                    "and bytes: after both.\n\n"
                    "| run | mount s | first directory s | daemon RSS MB | GETs | GET MB |\n"
                    "|---|---|---|---|---|---|\n")
            for r in scale:
                f.write(f"| {r['run']} | {r['mount_s']} | {r['first_dir_s']} | {r['rss_mb']} | "
                        f"{r.get('remote_gets')} | {r.get('remote_get_bytes', 0) / 1e6:.1f} |\n")
    print(f"wrote {out}.md", flush=True)


if __name__ == "__main__":
    main()
