#!/usr/bin/python3
"""Reading a tree inside a memory limit smaller than its files (issue 29 point 6), side by side.

  /usr/bin/python3 bench/memory_bench.py [--src TREE | --count 120000] [--work DIR]
      [--dsfs BUILD/dsfs] [--readbench BUILD/bench/dsfs-readbench]
      [--limits 2x,1x,0.5x,store] [--threads 1,2] [--passes 3] [--readers ...]
      [--imagefolder-subset 20000] [--small-group 16K]

The tree (default: 120,000 32x32 JPEG photo crops built by bench/lib/datasets.py photo-crops) is
packed as a dsfs store at the default group size and at --small-group, as `mksquashfs -comp zstd`
and as `mkfs.erofs -zlz4hc`, and copied to a tmpfs. Its page-cache footprint as files (one page
per started 4 KiB of each file) sets the limits: 2x, 1x and 0.5x the footprint, and `store`: the
default store's size plus 64 MiB (what the reader and a minimal cache need).

Every reader then runs in one memory cgroup (v1, /sys/fs/cgroup/memory/dsfs-memory-bench-PID,
made here and removed at the end) holding the mount's daemon (squashfuse_ll, dsfs) and the
reading process, so that the files' page cache is charged to the limit as in a container; this
script itself stays outside it. Per limit and reader: drop_caches, a fresh mount with default
options, dsfs-readbench over every file in one shuffled order, PASSES passes of
open+read+close with each thread count. Readers: ext4 (TREE itself), dsfs classic and `-o
kernel` (both stores), `-o kernel=loop`, squashfuse_ll, EROFS on a read-only loop device with
direct I/O; at the largest limit also the tmpfs copy and `-o kernel` with 4 threads (hot). Each
row records the failed reads, the cgroup's OOM kills (memory.oom_control), its peak usage and
the daemon's VmHWM. Then the unmodified ImageFolder script (bench/lib/imagefolder_read.py, 2
workers, --imagefolder-subset images, epoch 1 after drop_caches) on ext4, classic and `-o
kernel`, the cgroup's limit raised by the script's own peak (measured first, on 512 images).

Writes bench/results/memory/memory-<date>.{jsonl,md} and the chart (bench/lib/plot.py);
`--report JSONL` writes them again from a results file (also one of a run stopped early).
Mounts only under WORK/mnt; unmounts and detaches what it made, even on failure.
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
from bench_util import (LIB, PY, READBENCH, REPO, daemon_memory, drop_caches, epochs_of,  # noqa: E402
                        is_mounted, readbench_argv, results_dir, sh)

MIB = 1 << 20
READERS = {
    # key: (label, kind, store, mount options)
    "ext4": ("ext4 (the tree)", "tree", None, None),
    "classic": ("dsfs classic", "dsfs", "default", []),
    "classic_small": ("dsfs classic, small groups", "dsfs", "small", []),
    "kernel": ("dsfs -o kernel", "dsfs", "default", ["-o", "kernel"]),
    "kernel_small": ("dsfs -o kernel, small groups", "dsfs", "small", ["-o", "kernel"]),
    "kernel_loop": ("dsfs -o kernel=loop", "dsfs", "default", ["-o", "kernel=loop"]),
    "squashfuse": ("squashfuse_ll (zstd)", "squashfuse", None, None),
    "erofs": ("EROFS lz4hc, loop, direct I/O", "erofs", None, None),
}
HOT = {"tmpfs": ("tmpfs copy", "tmpfs", None, None), "kernel": READERS["kernel"]}


def footprint(src):
    files, pages, nbytes = 0, 0, 0
    for d, _, fs in os.walk(src):
        for f in fs:
            n = os.path.getsize(os.path.join(d, f))
            files, nbytes, pages = files + 1, nbytes + n, pages + (n + 4095) // 4096
    return files, nbytes, pages * 4096


class Cgroup:
    """A v1 memory cgroup of our own; children enter it through preexec (this script does not)."""

    def __init__(self):
        self.path = f"/sys/fs/cgroup/memory/dsfs-memory-bench-{os.getpid()}"
        os.makedirs(self.path)

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(f"{value}\n")

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def oom_kills(self):
        for line in self.read("memory.oom_control").splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
        return 0

    def limit(self, nbytes):
        self.write("memory.limit_in_bytes", nbytes if nbytes else -1)
        self.write("memory.max_usage_in_bytes", 0)

    def enter(self):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def run(self, argv, timeout=1800):
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, preexec_fn=self.enter)

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.2)


class Reader:
    """One way of serving the tree, mounted under `mnt` by a process in the cgroup."""

    def __init__(self, kind, cg, a, paths, store=None, opts=None):
        self.kind, self.cg, self.a, self.paths = kind, cg, a, paths
        self.store, self.opts = store, opts or []
        self.mnt = os.path.join(a.work, "mnt")
        self.loop = None

    def __enter__(self):
        if self.kind == "tree":
            return self.paths["src"]
        if self.kind == "tmpfs":
            return self.paths["tmpfs_tree"]
        os.makedirs(self.mnt, exist_ok=True)
        if self.kind == "dsfs":
            r = self.cg.run([self.a.dsfs, "mount", self.store, self.mnt, *self.opts])
        elif self.kind == "squashfuse":
            r = self.cg.run(["squashfuse_ll", self.paths["sqfs"], self.mnt])
        else:
            r = sh(["losetup", "--direct-io=on", "-r", "-f", "--show", self.paths["erofs"]])
            if r.returncode == 0:
                self.loop = r.stdout.strip()
                r = self.cg.run(["mount", "-t", "erofs", "-o", "ro", self.loop, self.mnt])
        if r.returncode != 0:
            self.__exit__()
            raise RuntimeError(r.stderr.strip()[-300:] or f"exit {r.returncode}")
        return self.mnt

    def __exit__(self, *exc):
        if self.kind in ("tree", "tmpfs"):
            return False
        for _ in range(50):
            if not is_mounted(self.mnt):
                break
            sh([self.a.dsfs, "umount", self.mnt] if self.kind == "dsfs" else ["umount", self.mnt])
            time.sleep(0.1)
        else:
            sh(["umount", "-l", self.mnt])
        if self.loop:
            sh(["losetup", "-d", self.loop])
            self.loop = None
        return False


def stats_of(mnt):
    try:
        with open(os.path.join(mnt, ".dsfs", "stats")) as f:
            st = json.load(f)
    except (OSError, ValueError):
        return {}
    keep = {k: st[k] for k in ("memory_limit", "memory_guard") if k in st}
    cache = st.get("cache") or {}
    keep["cache"] = {k: cache[k] for k in cache if "bytes" in k or "capacity" in k}
    return keep


def readbench(cg, a, root, lst, threads):
    # Failed reads are figures here (the limit may be too small), not an error of the run.
    r = cg.run(readbench_argv(a.readbench, root, lst, threads, a.passes), timeout=1800)
    rows = epochs_of(r.stdout)
    return {"files_per_s": [x["files_per_s"] for x in rows], "errors": [x["errors"] for x in rows],
            "files": rows[0]["files"] if rows else 0,
            "failed": None if rows else (r.stderr.strip()[-300:] or f"exit {r.returncode}")}


def measure(cg, a, paths, limit, spec, threads, emit, extra):
    label, kind, store, opts = spec
    drop_caches()
    cg.limit(limit)
    kills = cg.oom_kills()
    row = {"kind": "read", "threads": threads, **extra}
    try:
        reader = Reader(kind, cg, a, paths, paths.get(store), opts)
        with reader as root:
            row.update(readbench(cg, a, root, paths["list"], threads))
            if kind == "dsfs":
                row["daemon"] = daemon_memory(reader.mnt)
                row["stats"] = stats_of(reader.mnt)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        row["failed"] = f"mount: {e}"
    row["oom_kills"] = cg.oom_kills() - kills
    row["max_usage"] = int(cg.read("memory.max_usage_in_bytes"))
    emit(row)
    return row


def imagefolder(cg, a, root, subset, epochs=2):
    r = cg.run([PY, os.path.join(LIB, "imagefolder_read.py"), root, "--epochs",
                str(epochs), "--workers", "2", "--batch", "256", "--subset", str(subset)],
               timeout=3600)
    ev = epochs_of(r.stdout)
    if r.returncode != 0 or len(ev) != epochs + 1:
        return {"failed": r.stderr.strip()[-300:] or f"exit {r.returncode}"}
    return {"images": ev[1]["images"], "epochs": [e["images_per_s"] for e in ev[1:]]}


def hot(v):
    """The mean of passes 2..N (the target's 'passes 2-3'), None for a failed run."""
    if not v or v.get("failed") or any(v["errors"]) or len(v["files_per_s"]) < 2:
        return None
    return statistics.mean(v["files_per_s"][1:])


def prepare(a):
    src = a.src or os.path.join(a.work, f"photo32-{a.count}")
    if not a.src and not os.path.isdir(src):
        r = sh([PY, os.path.join(LIB, "datasets.py"), "photo-crops", src, "--count",
                str(a.count)])
        if r.returncode != 0:
            raise SystemExit(f"memory_bench: cannot build the tree: {r.stderr.strip()}")
    src = os.path.abspath(src)
    w = a.work
    paths = {"src": src, "list": os.path.join(w, "files.list"), "default": os.path.join(w, "g-default.dsfs"),
             "small": os.path.join(w, f"g{a.small_group}.dsfs"), "sqfs": os.path.join(w, "tree.sqfs"),
             "erofs": os.path.join(w, "tree.erofs"), "tmpfs": os.path.join(w, "tmpfs")}
    paths["tmpfs_tree"] = os.path.join(paths["tmpfs"], "tree")
    steps = [
        ([a.readbench, src, "--write-list", paths["list"]], None),
        ([a.dsfs, "pack", "-q", "-f", src, paths["default"]], None),
        ([a.dsfs, "pack", "-q", "-f", "--group-size", a.small_group, src, paths["small"]], None),
        (["mksquashfs", src, paths["sqfs"], "-comp", "zstd", "-noappend", "-quiet", "-no-progress"],
         None),
        (["mkfs.erofs", "-zlz4hc", paths["erofs"], src], None),
    ]
    for argv, _ in steps:
        r = sh(argv, timeout=3600)
        if r.returncode != 0:
            raise SystemExit(f"memory_bench: {' '.join(argv[:2])}: {r.stderr.strip()[-300:]}")
    os.makedirs(paths["tmpfs"], exist_ok=True)
    if not is_mounted(paths["tmpfs"]):
        sh(["mount", "-t", "tmpfs", "-o", "size=50%", "tmpfs", paths["tmpfs"]])
    shutil.rmtree(paths["tmpfs_tree"], ignore_errors=True)
    shutil.copytree(src, paths["tmpfs_tree"])  # by this script: not charged to the cgroup
    return paths


def size_of(path):
    return os.path.getsize(path) if os.path.isfile(path) else sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def report(jsonl, desc="", run_s=None):
    """Writes the .md beside `jsonl` (and its chart) from the rows it holds: also for a run
    stopped early (`--report FILE.jsonl`)."""
    rows = [json.loads(x) for x in open(jsonl) if x.strip()]
    setup = next(r for r in rows if r["kind"] == "setup")
    reads = [r for r in rows if r["kind"] == "read"]
    ifold = [r for r in rows if r["kind"] == "imagefolder"]
    own = next((r["max_usage"] for r in rows if r["kind"] == "imagefolder_own"), None)
    sizes, limits = setup["sizes"], list(setup["limits"].items())
    stamp = os.path.basename(jsonl)[len("memory-"):-len(".jsonl")]

    def find(lname, key, t):
        return next((r for r in reads if r["limit"] == lname and r["reader"] == key
                     and r["threads"] == t), None)

    def cell(v):
        if v.get("failed"):
            return "**failed**: " + v["failed"].replace("|", "/").replace("\n", " ")[:80]
        rates = ", ".join(f"{x / 1000:.1f}k" for x in v["files_per_s"])
        bad = sum(v["errors"])
        return rates + (f" (**{bad:,} failed reads**)" if bad else "")

    lines = [f"# Reading inside a memory limit: files/s by limit and reader, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM, "
             f"kernel {platform.release()}; dsfs main {setup.get('commit', '')} {desc}",
             f"- tree: {setup['tree']}: {setup['files']:,} files, {setup['bytes'] / 1e6:.1f} MB "
             f"of bytes, page-cache footprint as files {setup['footprint'] / 1e6:.1f} MB",
             f"- stores: dsfs default {sizes['default'] / 1e6:.1f} MB, dsfs small groups "
             f"{sizes['small'] / 1e6:.1f} MB, mksquashfs -comp zstd {sizes['sqfs'] / 1e6:.1f} MB, "
             f"mkfs.erofs -zlz4hc {sizes['erofs'] / 1e6:.1f} MB",
             "- one memory cgroup (v1) holds the daemon and the reader; per row: drop_caches, a "
             "fresh mount with default options, shuffled passes of open+read+close over every "
             "file (dsfs-readbench); 'vs ext4' = mean of passes 2..N over ext4's at the same "
             "limit and threads (hot rows: over the tmpfs copy's); OOM = kills in the cgroup "
             "(memory.oom_control); peak = memory.max_usage_in_bytes; daemon = its VmHWM", ""]
    for lname, lbytes in limits:
        mine = [r for r in reads if r["limit"] == lname]
        if not mine:
            lines += [f"## limit {lname} = {lbytes / 1e6:.0f} MB: not run", ""]
            continue
        lines += [f"## limit {lname} = {lbytes / 1e6:.0f} MB", "",
                  "| reader | threads | files/s, passes 1..N | vs ext4 | OOM | peak MB | daemon MB |",
                  "|---|---|---|---|---|---|---|"]
        for v in mine:
            key, t = v["reader"], v["threads"]
            base = find(lname, "hot_tmpfs", 4) if key.startswith("hot_") else find(lname, "ext4", t)
            h, hb = hot(v), hot(base) if base else None
            ratio = f"{h / hb:.2f}x" if h and hb else "-"
            label = READERS[key][0] if key in READERS else HOT[key[4:]][0] + ", hot"
            hwm = (v.get("daemon") or {}).get("VmHWM")
            lines.append(f"| {label} | {t} | {cell(v)} | {ratio} | {v['oom_kills']} | "
                         f"{v['max_usage'] / 1e6:.0f} | {f'{hwm / 1e3:.0f}' if hwm else '-'} |")
        lines.append("")
    if ifold:
        lines += ["## The unmodified ImageFolder script (2 workers; the limit + the script's own "
                  f"peak, {own / 1e6:.0f} MB)" if own else "## The unmodified ImageFolder script",
                  "", "| limit | reader | epoch 1 images/s | epoch 2 images/s | OOM |",
                  "|---|---|---|---|---|"]
        for v in ifold:
            name = READERS[v["reader"]][0]
            if v.get("failed"):
                lines.append(f"| {v['limit']} | {name} | **failed**: "
                             f"{v['failed'][:80].replace('|', '/')} | | {v['oom_kills']} |")
            else:
                lines.append(f"| {v['limit']} | {name} | {v['epochs'][0]:,.0f} | "
                             f"{v['epochs'][1]:,.0f} | {v['oom_kills']} |")
        lines.append("")
    lines += [(f"Run time {run_s:.0f} s. " if run_s else "") + "Raw figures: the .jsonl beside "
              "this file; command: `bench/memory_bench.py`.", ""]
    md = jsonl[:-len(".jsonl")] + ".md"
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    subprocess.run([PY, os.path.join(LIB, "plot.py"), jsonl], check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", help="the tree (default: photo crops built under WORK)")
    ap.add_argument("--count", type=int, default=120000, help="photo crops to build without --src")
    ap.add_argument("--work", default=os.path.join(os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"),
                                                   "memory"))
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--limits", default="2x,1x,0.5x,store",
                    help="multiples of the page-cache footprint, 'store' (its size + 64 MiB) or sizes in MiB")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--readers", default=",".join(READERS))
    ap.add_argument("--small-group", default="16K")
    ap.add_argument("--imagefolder-subset", type=int, default=20000, help="0: no ImageFolder runs")
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    ap.add_argument("--report", metavar="JSONL", help="only write the report of a results file")
    a = ap.parse_args()
    if a.report:
        report(os.path.abspath(a.report), a.desc)
        return 0
    a.dsfs, a.readbench = os.path.abspath(a.dsfs), os.path.abspath(a.readbench)
    a.work = os.path.abspath(a.work)
    os.makedirs(a.work, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("memory"), f"memory-{stamp}")
    t_start = time.monotonic()
    paths = prepare(a)
    files, nbytes, fp = footprint(paths["src"])
    sizes = {k: size_of(paths[k]) for k in ("default", "small", "sqfs", "erofs")}
    limits = []
    for x in a.limits.split(","):
        if x == "store":
            limits.append((f"store+64M", sizes["default"] + 64 * MIB))
        elif x.endswith("x"):
            limits.append((x, int(fp * float(x[:-1]))))
        else:
            limits.append((f"{x}M", int(x) * MIB))
    limits.sort(key=lambda l: -l[1])
    threads = [int(t) for t in a.threads.split(",")]
    readers = a.readers.split(",")
    jsonl = open(out + ".jsonl", "w")

    def emit(row):
        jsonl.write(json.dumps(row) + "\n")
        jsonl.flush()
        print(f"[{time.strftime('%H:%M:%S')}] {row}", flush=True)

    commit = sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]).stdout.strip()
    emit({"kind": "setup", "tree": paths["src"], "files": files, "bytes": nbytes, "footprint": fp,
          "sizes": sizes, "limits": dict(limits), "commit": commit})
    cg = Cgroup()
    results, ifold = {}, {}
    try:
        for lname, lbytes in limits:
            base = {"limit": lname, "limit_bytes": lbytes}
            for key in readers:
                for t in threads:
                    results[(lname, key, t)] = measure(cg, a, paths, lbytes, READERS[key], t, emit,
                                                       {**base, "reader": key})
            if lbytes == max(l[1] for l in limits):
                for key, spec in HOT.items():
                    results[(lname, "hot_" + key, 4)] = measure(
                        cg, a, paths, lbytes, spec, 4, emit, {**base, "reader": "hot_" + key})
        if a.imagefolder_subset:
            drop_caches()
            cg.limit(0)
            imagefolder(cg, a, paths["src"], 512, epochs=1)
            own = int(cg.read("memory.max_usage_in_bytes"))
            emit({"kind": "imagefolder_own", "max_usage": own})
            for lname, lbytes in limits:
                for key in ("ext4", "classic", "kernel"):
                    label, kind, store, opts = READERS[key]
                    drop_caches()
                    cg.limit(lbytes + own)
                    kills = cg.oom_kills()
                    row = {"kind": "imagefolder", "limit": lname, "limit_bytes": lbytes + own,
                           "reader": key}
                    try:
                        with Reader(kind, cg, a, paths, paths.get(store), opts) as root:
                            row.update(imagefolder(cg, a, root, a.imagefolder_subset))
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        row["failed"] = f"mount: {e}"
                    row["oom_kills"] = cg.oom_kills() - kills
                    row["max_usage"] = int(cg.read("memory.max_usage_in_bytes"))
                    ifold[(lname, key)] = row
                    emit(row)
    finally:
        cg.remove()
        sh(["umount", paths["tmpfs"]])
        jsonl.close()

    report(out + ".jsonl", a.desc, time.monotonic() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
