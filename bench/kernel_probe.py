#!/usr/bin/python3
"""Why a `-o kernel` mount reads as fast as it does inside a memory limit: one reader, one limit,
pass by pass, with what each pass cost (issue 40's diagnosis).

  /usr/bin/python3 bench/kernel_probe.py --dsfs BUILD/dsfs --store S.dsfs --tree TREE
      --list FILES.list --limit-mb 307 [--opts kernel,push=0] [--env K=V ...] [--passes 2]
      [--threads 2] [--erofs IMAGE]

--opts '' mounts classic (FUSE only).
One v1 memory cgroup (dsfs-kimage-probe-PID) holds the daemon and dsfs-readbench; per pass it
prints files/s and the deltas of: the image server's reads and bytes (`dsfs stats`), the daemon's
CPU seconds, the cgroup's page faults, refaults and page-cache size (memory.stat). --erofs IMAGE
mounts the image file itself (mount(2), buffered) instead of dsfs. Mounts under a directory of
its own; unmounts and removes what it made, even on failure.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import READBENCH, drop_caches, epochs_of, is_mounted, readbench_argv, sh  # noqa: E402

STAT_KEYS = ("cache", "rss", "mapped_file", "active_file", "inactive_file", "pgmajfault", "workingset_refault",
             "workingset_activate", "pgpgin")


class Cgroup:
    def __init__(self):
        self.path = f"/sys/fs/cgroup/memory/dsfs-kimage-probe-{os.getpid()}"
        os.makedirs(self.path)

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(f"{value}\n")

    def stat(self):
        with open(os.path.join(self.path, "memory.stat")) as f:
            st = dict(line.split() for line in f)
        return {k: int(st.get(k, 0)) for k in STAT_KEYS}

    def kmem(self):
        try:
            with open(os.path.join(self.path, "memory.kmem.usage_in_bytes")) as f:
                return int(f.read())
        except OSError:
            return 0

    def pids(self):
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]

    def enter(self):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def run(self, argv, env=None):
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=3600, preexec_fn=self.enter, env=env)

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.2)


def cpu_s(pids):
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")


def kstats(dsfs, mnt):
    r = sh([dsfs, "stats", "--json", mnt]) if dsfs else None
    if not r or r.returncode != 0:
        return {}
    try:
        j = json.loads(r.stdout)
    except ValueError:
        return {}
    k = j.get("kernel", {})
    return {"reads": k.get("image_reads", 0), "bytes": k.get("image_bytes_read", 0),
            "ra_bytes": (k.get("readahead") or {}).get("bytes", 0), "directio": k.get("directio"),
            "compressed": k.get("compressed"), "c_hits": j.get("cache", {}).get("hits", 0),
            "c_misses": j.get("cache", {}).get("misses", 0),
            "c_mb": j.get("cache", {}).get("bytes", 0) >> 20,
            "c_cap_mb": j.get("cache", {}).get("capacity_bytes", 0) >> 20,
            "lat": k.get("image_read_latency", {}).get("buckets")}


def slab_top(path, n=8):
    try:
        with open(os.path.join(path, "memory.kmem.slabinfo")) as f:
            lines = f.read().splitlines()[2:]
    except OSError as e:
        return f"slabinfo: {e}"
    rows = []
    for line in lines:
        x = line.split()
        rows.append((int(x[2]) * int(x[3]) >> 20, x[0]))  # num_objs * objsize
    rows.sort(reverse=True)
    return "slab MB: " + ", ".join(f"{name} {mb}" for mb, name in rows[:n])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsfs")
    ap.add_argument("--store")
    ap.add_argument("--erofs")
    ap.add_argument("--list", required=True)
    ap.add_argument("--limit-mb", type=float, required=True)
    ap.add_argument("--opts", default="kernel")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--label", default="")
    ap.add_argument("--slabinfo", action="store_true", help="the cgroup's largest slab caches")
    a = ap.parse_args()
    env = dict(os.environ, **dict(e.split("=", 1) for e in a.env))
    mnt = tempfile.mkdtemp(prefix="dsfs-kimage-probe-")
    cg = Cgroup()
    try:
        drop_caches()
        cg.write("memory.limit_in_bytes", int(a.limit_mb * (1 << 20)))
        if a.erofs:
            code = ("import ctypes,sys;l=ctypes.CDLL(None,use_errno=True);"
                    "sys.exit(l.mount(sys.argv[1].encode(),sys.argv[2].encode(),b'erofs',1,b''))")
            r = cg.run([sys.executable, "-c", code, a.erofs, mnt])
        else:
            opts = ["-o", a.opts] if a.opts else []  # --opts '': a classic (FUSE) mount
            r = cg.run([a.dsfs, "mount", a.store, mnt, *opts], env=env)
        if r.returncode != 0:
            raise SystemExit(f"mount: {r.stderr.strip()[-300:]}")
        print(json.dumps({"label": a.label, "limit_mb": a.limit_mb, "opts": a.opts, "env": a.env,
                          "load": os.getloadavg()[0], **kstats(a.dsfs, mnt)}), flush=True)
        for p in range(a.passes):
            k0, s0, c0 = kstats(a.dsfs, mnt), cg.stat(), cpu_s(cg.pids())
            t0 = time.monotonic()
            r = cg.run(readbench_argv(a.readbench, mnt, a.list, a.threads, 1))
            wall = time.monotonic() - t0
            k1, s1, c1 = kstats(a.dsfs, mnt), cg.stat(), cpu_s(cg.pids())
            rows = epochs_of(r.stdout)
            row = {"pass": p + 1, "files_per_s": rows[0]["files_per_s"] if rows else None,
                   "errors": rows[0]["errors"] if rows else r.stderr[-200:], "wall_s": round(wall, 1),
                   "daemon_cpu_s": round(c1 - c0, 2), "load": round(os.getloadavg()[0], 1)}
            for key in ("c_mb", "c_cap_mb", "lat"):
                row[key] = k1.get(key)
            for key in ("reads", "bytes", "ra_bytes", "c_hits", "c_misses"):
                if key in k1:
                    row["img_" + key] = k1[key] - k0.get(key, 0)
            if row.get("img_reads"):
                row["img_kib_per_read"] = round(row["img_bytes"] / row["img_reads"] / 1024, 1)
            for key in ("pgmajfault", "workingset_refault", "workingset_activate", "pgpgin"):
                row[key] = s1[key] - s0[key]
            row["cache_mb"] = s1["cache"] >> 20
            row["rss_mb"] = s1["rss"] >> 20
            row["mapped_mb"] = s1["mapped_file"] >> 20
            row["kmem_mb"] = cg.kmem() >> 20
            row["active_file_mb"] = s1["active_file"] >> 20
            row["inactive_file_mb"] = s1["inactive_file"] >> 20
            print(json.dumps(row), flush=True)
        if a.slabinfo:
            with open(os.path.join(cg.path, "memory.stat")) as f:
                st = dict(line.split() for line in f)
            print({k: int(v) >> 20 for k, v in st.items()
                   if not k.startswith("total_") and int(v) >= (1 << 20)}, flush=True)
            for name in ("memory.kmem.usage_in_bytes", "memory.kmem.max_usage_in_bytes",
                         "memory.usage_in_bytes"):
                with open(os.path.join(cg.path, name)) as f:
                    print(name, int(f.read()) >> 20, "MB", flush=True)
    finally:
        for _ in range(50):
            if not is_mounted(mnt):
                break
            sh([a.dsfs, "umount", mnt] if a.dsfs and not a.erofs else ["umount", mnt])
            time.sleep(0.2)
        os.rmdir(mnt)
        cg.remove()


if __name__ == "__main__":
    main()
