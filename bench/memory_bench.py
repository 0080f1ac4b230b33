#!/usr/bin/python3
"""Reading a tree inside a memory limit smaller than its files (issues 29.6, 40.6), side by side.

  /usr/bin/python3 bench/memory_bench.py [--src TREE | --count 120000] [--work DIR]
      [--dsfs BUILD/dsfs] [--dsfs-label NAME] [--dsfs-b OTHER/dsfs --dsfs-b-label NAME
      [--pack-b-opts '...'] [--mount-b-opts '...']] [--readbench BUILD/bench/dsfs-readbench]
      [--limits 2x,1x,0.5x,store] [--threads 1,2] [--hot-threads 4] [--passes 3]
      [--readers ext4,classic,kernel,erofs,erofs_lz4hc,erofs_zstd:filedio,...]
      [--erofs-cluster 65536] [--imagefolder-subset 20000] [--imagefolder-limits 0.5x]
      [--small-group 16K]

The tree (default: 120,000 32x32 JPEG photo crops built by bench/lib/datasets.py photo-crops) is
packed as what the chosen readers need: a dsfs store at the default group size and at
--small-group, `mksquashfs -comp zstd`, and three EROFS images: `erofs`, Debian 12's
`mkfs.erofs -zlz4hc` (erofs-utils 1.5, which compresses no file below a block: an inline,
uncompressed image, labelled so), and the compressed anchors of erofs-utils 1.9
(mkfs.erofs-1.9, bench only: ../shared/tools/build-erofs-utils.sh) `erofs_lz4hc` = `-zlz4hc
-C65536 -Efragments,ztailpacking` and `erofs_zstd` = `-zzstd -C65536 -Efragments,ztailpacking`
(small files as fragments of one packed inode whose pclusters are compressed). Each image's
`dump.erofs -S` counts ("compressed files: N") are recorded and printed; an anchor whose image
holds no compressed file is labelled NOT compressed. A tmpfs copy is made when a hot row needs it.
The page-cache footprint of the tree as files (one page per started 4 KiB of each file) sets the
limits: 2x, 1x and 0.5x the footprint, and `store`: the default store's size plus 64 MiB (what
the reader and a minimal cache need).

Every reader then runs in one memory cgroup (v1, /sys/fs/cgroup/memory/dsfs-membench-PID, made
here and removed at the end) holding the mount's daemon (squashfuse_ll, dsfs) and the reading
process, so that the files' page cache is charged to the limit as in a container; this script
itself stays outside it. Per limit and reader: drop_caches, a fresh mount with default options,
dsfs-readbench over every file in one shuffled order, PASSES passes of open+read+close with each
thread count. Readers: ext4 (TREE itself), dsfs classic and `-o kernel` (both stores), `-o
kernel=loop`, squashfuse_ll, and the EROFS images as IMAGE[:MOUNT], MOUNT one of loopdio (a
read-only loop device with direct I/O, the default of `erofs`), loop, file (mount(2) on the
image file, no loop device, buffered: the default of the compressed anchors, which EROFS.md says
to mount without directio) and filedio. With --dsfs-b a second binary packs its own default
store (--pack-b-opts) and adds the readers classic_b and kernel_b (rows labelled by binary). At
the largest limit also the tmpfs copy and `-o kernel` hot with --hot-threads (a `-o kernel` row
already measured with those threads is not run twice). Each row records the failed reads, the
cgroup's OOM kills (memory.oom_control), its peak usage, the daemon's VmHWM and the load
average. Then the unmodified ImageFolder script (bench/lib/imagefolder_read.py, 2 workers,
--imagefolder-subset images, epoch 1 after drop_caches) at --imagefolder-limits on ext4, classic
and `-o kernel` (and the second binary's), the cgroup's limit raised by the script's own peak
(measured first, on 512 images). The report ends with the targets of issue 40 (-o kernel vs
the best EROFS image and vs ext4, classic vs ext4 at store+64M, 0.5x and 1x; -o kernel hot vs
tmpfs at the largest limit; ImageFolder -o kernel vs ext4 at 0.5x).

Writes bench/results/memory/memory-<date>.{jsonl,md} and the chart (bench/lib/plot.py);
`--report JSONL` writes them again from a results file (also one of a run stopped early).
Mounts only under WORK/mnt; unmounts and detaches what it made, even on failure.
"""
import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import (LIB, PY, READBENCH, REPO, daemon_memory, drop_caches, epochs_of,  # noqa: E402
                        is_mounted, readbench_argv, results_dir, sh)

MIB = 1 << 20
MKFS_EROFS_19, DUMP_EROFS_19 = "mkfs.erofs-1.9", "dump.erofs-1.9"
# key: (label, mkfs.erofs argv before IMAGE SRC; CLUSTER: --erofs-cluster, default mount)
EROFS_IMAGES = {
    "erofs": ("EROFS 1.5 inline (uncompressed)", ["mkfs.erofs", "-zlz4hc"], "loopdio"),
    "erofs_lz4hc": ("EROFS 1.9 lz4hc fragments", [MKFS_EROFS_19, "-zlz4hc", "-CCLUSTER",
                                                  "-Efragments,ztailpacking"], "file"),
    "erofs_zstd": ("EROFS 1.9 zstd fragments", [MKFS_EROFS_19, "-zzstd", "-CCLUSTER",
                                                "-Efragments,ztailpacking"], "file"),
}
EROFS_MOUNTS = {"loopdio": "loop, direct I/O", "loop": "loop, buffered",
                "file": "file-backed, buffered", "filedio": "file-backed, direct I/O"}
READERS = {
    # key: (label, kind, store, mount options)
    "ext4": ("ext4 (the tree)", "tree", None, None),
    "classic": ("dsfs classic", "dsfs", "default", []),
    "classic_small": ("dsfs classic, small groups", "dsfs", "small", []),
    "kernel": ("dsfs -o kernel", "dsfs", "default", ["-o", "kernel"]),
    "kernel_small": ("dsfs -o kernel, small groups", "dsfs", "small", ["-o", "kernel"]),
    "kernel_loop": ("dsfs -o kernel=loop", "dsfs", "default", ["-o", "kernel=loop"]),
    "squashfuse": ("squashfuse_ll (zstd)", "squashfuse", None, None),
    "tmpfs": ("tmpfs copy", "tmpfs", None, None),
}
for _img, (_label, _, _mount) in EROFS_IMAGES.items():
    for _m, _mlabel in EROFS_MOUNTS.items():
        _spec = (f"{_label}, {_mlabel}", "erofs", _img, _m)
        READERS[f"{_img}:{_m}"] = _spec
        if _m == _mount:
            READERS[_img] = _spec
# The second binary's readers (--dsfs-b): its own default store, its labels get its name.
B_READERS = {"classic_b": ("classic", []), "kernel_b": ("kernel", ["-o", "kernel"])}
HOT = ("tmpfs", "kernel", "kernel_b")


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
        self.path = f"/sys/fs/cgroup/memory/dsfs-membench-{os.getpid()}"
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


# mount(2) of an EROFS image file, no loop device (file-backed, Linux 6.12+): mount(8) would
# attach a loop device by itself. Run inside the cgroup: argv IMAGE MNT OPTIONS.
MOUNT_FILE = """import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(sys.argv[1].encode(), sys.argv[2].encode(), b"erofs", 1, sys.argv[3].encode()):
    sys.exit(f"mount(2) {sys.argv[1]}: {os.strerror(ctypes.get_errno())}")
"""


class Reader:
    """One way of serving the tree (a READERS spec), mounted under `mnt` by a process in the
    cgroup; `dsfs` is the binary of a dsfs reader."""

    def __init__(self, spec, cg, a, paths, dsfs=None):
        _, self.kind, store, self.opts = spec
        self.cg, self.a, self.paths, self.dsfs = cg, a, paths, dsfs or a.dsfs
        self.store = paths.get(store)
        self.mnt = os.path.join(a.work, "mnt")
        self.loop = None

    def __enter__(self):
        if self.kind == "tree":
            return self.paths["src"]
        if self.kind == "tmpfs":
            return self.paths["tmpfs_tree"]
        os.makedirs(self.mnt, exist_ok=True)
        if self.kind == "dsfs":
            r = self.cg.run([self.dsfs, "mount", self.store, self.mnt, *self.opts])
        elif self.kind == "squashfuse":
            r = self.cg.run(["squashfuse_ll", self.paths["sqfs"], self.mnt])
        elif self.opts.startswith("file"):
            r = self.cg.run([PY, "-c", MOUNT_FILE, self.store, self.mnt,
                             "directio" if self.opts == "filedio" else ""])
        else:
            dio = "on" if self.opts == "loopdio" else "off"
            r = sh(["losetup", f"--direct-io={dio}", "-r", "-f", "--show", self.store])
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
            sh([self.dsfs, "umount", self.mnt] if self.kind == "dsfs" else ["umount", self.mnt])
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


def spec_of(a, key):
    """(READERS spec, dsfs binary) of reader `key`; the _b readers are the second binary's."""
    if key in B_READERS:
        base, opts = B_READERS[key]
        label, kind, _, _ = READERS[base]
        return (label, kind, "default_b", opts + shlex.split(a.mount_b_opts)), a.dsfs_b
    return READERS[key], a.dsfs


def measure(cg, a, paths, limit, key, threads, emit, extra):
    spec, dsfs = spec_of(a, key)
    drop_caches()
    cg.limit(limit)
    kills = cg.oom_kills()
    row = {"kind": "read", "threads": threads, **extra, "load": os.getloadavg()[0]}
    try:
        reader = Reader(spec, cg, a, paths, dsfs)
        with reader as root:
            row.update(readbench(cg, a, root, paths["list"], threads))
            if spec[1] == "dsfs":
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


def needs(a, readers):
    """The paths the chosen readers read (store and image keys, 'tmpfs')."""
    keys = set()
    for key in readers:
        spec, _ = spec_of(a, key)
        keys.add(spec[2] if spec[1] in ("dsfs", "erofs") else spec[1])
    return keys


def erofs_dump(image):
    """dump.erofs -S's counts of IMAGE: {"compressed files": N, ...} and the lines themselves."""
    r = sh([DUMP_EROFS_19, "-S", image])
    out = {"lines": []}
    for line in r.stdout.splitlines():
        m = re.match(r"Filesystem (compressed files|uncompressed files|total original file size|"
                     r"total file size|compress rate|regular file count):\s*(\S+)", line.strip())
        if m:
            out["lines"].append(" ".join(line.split()))
            out[m.group(1)] = int(m.group(2)) if m.group(2).isdigit() else m.group(2)
    if "compressed files" not in out:
        raise SystemExit(f"memory_bench: {DUMP_EROFS_19} -S {image}: {r.stderr.strip()[-300:]}")
    return out


def prepare(a, readers):
    src = a.src or os.path.join(a.work, f"photo32-{a.count}")
    if not a.src and not os.path.isdir(src):
        r = sh([PY, os.path.join(LIB, "datasets.py"), "photo-crops", src, "--count",
                str(a.count)])
        if r.returncode != 0:
            raise SystemExit(f"memory_bench: cannot build the tree: {r.stderr.strip()}")
    src = os.path.abspath(src)
    w = a.work
    paths = {"src": src, "list": os.path.join(w, "files.list"),
             "default": os.path.join(w, "g-default.dsfs"),
             "default_b": os.path.join(w, "g-default-b.dsfs"),
             "small": os.path.join(w, f"g{a.small_group}.dsfs"),
             "sqfs": os.path.join(w, "tree.sqfs"), "tmpfs": os.path.join(w, "tmpfs")}
    paths.update({k: os.path.join(w, f"tree.{k}") for k in EROFS_IMAGES})
    paths["tmpfs_tree"] = os.path.join(paths["tmpfs"], "tree")
    want = needs(a, readers) | {"default"}  # the default store sets the store+64M limit
    steps = [("list", [a.readbench, src, "--write-list", paths["list"]]),
             ("default", [a.dsfs, "pack", "-q", "-f", src, paths["default"]]),
             ("default_b", [a.dsfs_b or "", "pack", "-q", "-f", *shlex.split(a.pack_b_opts), src,
                            paths["default_b"]]),
             ("small", [a.dsfs, "pack", "-q", "-f", "--group-size", a.small_group, src,
                        paths["small"]]),
             ("sqfs", ["mksquashfs", src, paths["sqfs"], "-comp", "zstd", "-noappend", "-quiet",
                       "-no-progress"])]
    for k, (_, mkfs, _) in EROFS_IMAGES.items():
        steps.append((k, [x.replace("CLUSTER", str(a.erofs_cluster)) for x in mkfs]
                      + [paths[k], src]))
    made = {}
    for key, argv in steps:
        if key != "list" and key not in want:
            continue
        if a.reuse and os.path.exists(paths[key]):
            made[key] = "reused"
            continue
        t0 = time.monotonic()
        if os.path.exists(paths[key]):
            os.unlink(paths[key])  # mkfs.erofs and mksquashfs would rather add to it
        r = sh(argv, timeout=3600)
        if r.returncode != 0:
            raise SystemExit(f"memory_bench: {' '.join(argv[:2])}: {r.stderr.strip()[-300:]}")
        made[key] = {"argv": argv, "s": round(time.monotonic() - t0, 1)}
    if "tmpfs" in want:
        os.makedirs(paths["tmpfs"], exist_ok=True)
        if not is_mounted(paths["tmpfs"]):
            sh(["mount", "-t", "tmpfs", "-o", "size=50%", "tmpfs", paths["tmpfs"]])
        shutil.rmtree(paths["tmpfs_tree"], ignore_errors=True)
        shutil.copytree(src, paths["tmpfs_tree"])  # by this script: not charged to the cgroup
    return paths, made


def size_of(path):
    return os.path.getsize(path) if os.path.isfile(path) else sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def labels_of(a, readers, dumps, bins):
    """Each reader's label as the report prints it: by binary when two are compared; an EROFS
    anchor whose image holds no compressed file is said to be NOT compressed."""
    out = {}
    for key in readers:
        (label, kind, store, _), _ = spec_of(a, key)
        if kind == "dsfs" and a.dsfs_b:
            label += f" [{bins['b' if key in B_READERS else 'a']['label']}]"
        if kind == "erofs" and store != "erofs" and not dumps[store]["compressed files"]:
            label += " (NOT compressed: dump.erofs -S 'compressed files: 0')"
        out[key] = label
        out["hot_" + key] = label + ", hot"
    return out


def label_of(setup, key):
    labels = setup.get("labels") or {}
    if key in labels:
        return labels[key]
    base = key[4:] if key.startswith("hot_") else key
    return READERS[base][0] + (", hot" if base != key else "")


def best_of(rows):
    """(rate, row) of the fastest row (mean of passes 2..N), (None, None) if none counts."""
    rated = [(hot(r), r) for r in rows if hot(r)]
    return max(rated, key=lambda x: x[0]) if rated else (None, None)


def ratio(x, y, target=None):
    if not x or not y:
        return "-"
    return f"{x / y:.2f}x" + ("" if target is None else " ok" if x / y >= target else " **no**")


def target_lines(setup, reads, ifold):
    """Issue 40's targets: at store+64M, 0.5x and 1x -o kernel >= 1.0x the best EROFS image and
    >= 2x ext4, classic >= 1.0x ext4; hot -o kernel >= 1.0x tmpfs at the largest limit;
    ImageFolder -o kernel >= 1.2x ext4 at 0.5x. 'ok' / 'no' says whether a ratio meets it."""
    limits = list(setup["limits"])
    threads = sorted({r["threads"] for r in reads if not r["reader"].startswith("hot_")})
    bins = [("", setup.get("dsfs", {}).get("a", {}).get("label", "dsfs"))]
    if any(r["reader"].endswith("_b") for r in reads):
        bins.append(("_b", setup["dsfs"]["b"]["label"]))

    def find(lname, key, t):
        return next((r for r in reads if r["limit"] == lname and r["reader"] == key
                     and r["threads"] == t), None)

    lines = ["## Targets (issue 40): mean of passes 2..N; 'ok' = the target is met", "",
             "| binary | limit | threads | -o kernel files/s | vs best EROFS (>= 1.0) | "
             "vs best compressed EROFS | vs ext4 (>= 2.0) | classic vs ext4 (>= 1.0) |",
             "|---|---|---|---|---|---|---|---|"]
    for sfx, name in bins:
        for lname in (x for x in ("store+64M", "0.5x", "1x") if x in limits):
            for t in threads:
                mine = [r for r in reads if r["limit"] == lname and r["threads"] == t]
                er, erow = best_of([r for r in mine if r["reader"].startswith("erofs")])
                cr, crow = best_of([r for r in mine if r["reader"].startswith("erofs")
                                    and not r["reader"].startswith("erofs:")
                                    and r["reader"] != "erofs"
                                    and (setup.get("erofs_dump", {}).get(
                                        r["reader"].split(":")[0], {}).get("compressed files"))])
                k, c, e = (hot(find(lname, x, t)) for x in ("kernel" + sfx, "classic" + sfx, "ext4"))
                if not (k or c):
                    continue
                en = f" ({label_of(setup, erow['reader'])})" if erow else ""
                cn = f" ({label_of(setup, crow['reader'])})" if crow else ""
                lines.append(f"| {name} | {lname} | {t} | {f'{k / 1000:.1f}k' if k else '-'} | "
                             f"{ratio(k, er, 1.0)}{en} | {ratio(k, cr)}{cn} | {ratio(k, e, 2.0)} | "
                             f"{ratio(c, e, 1.0)} |")
    top = limits[0] if limits else None
    hots = [r for r in reads if r["limit"] == top and r["reader"] == "hot_tmpfs"]
    if hots:
        lines += ["", f"| binary | hot at {top}, threads | -o kernel files/s | tmpfs files/s | "
                  "-o kernel vs tmpfs (>= 1.0) |", "|---|---|---|---|---|"]
        for sfx, name in bins:
            for tr in hots:
                t = tr["threads"]
                k = hot(find(top, "hot_kernel" + sfx, t) or find(top, "kernel" + sfx, t))
                tm = hot(tr)
                lines.append(f"| {name} | {t} | {f'{k / 1000:.1f}k' if k else '-'} | "
                             f"{f'{tm / 1000:.1f}k' if tm else '-'} | {ratio(k, tm, 1.0)} |")
    rows = [v for v in ifold if v["limit"] == "0.5x" and not v.get("failed")]
    base = next((v for v in rows if v["reader"] == "ext4"), None)
    if base:
        lines += ["", "| binary | ImageFolder at 0.5x | epoch 1 images/s | vs ext4 (>= 1.2) |",
                  "|---|---|---|---|"]
        for sfx, name in bins:
            v = next((v for v in rows if v["reader"] == "kernel" + sfx), None)
            if v:
                lines.append(f"| {name} | -o kernel | {v['epochs'][0]:,.0f} | "
                             f"{ratio(v['epochs'][0], base['epochs'][0], 1.2)} |")
    return lines + [""]


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

    names = {"default": "dsfs default", "default_b": "dsfs default (second binary)",
             "small": "dsfs small groups", "sqfs": "mksquashfs -comp zstd",
             **{k: v[0] for k, v in EROFS_IMAGES.items()}}
    bins = setup.get("dsfs") or {}
    loads = [r["load"] for r in reads if "load" in r]
    lines = [f"# Reading inside a memory limit: files/s by limit and reader, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM, "
             f"kernel {platform.release()}; bench {setup.get('commit', '')} {desc}"]
    for k, b in sorted(bins.items()):
        lines.append(f"- dsfs {'(second binary) ' if k == 'b' else ''}{b['label']}: {b['path']} "
                     f"(built {b['mtime']}, its tree at {b.get('commit') or '?'})")
    if loads:
        lines.append(f"- load average (1 min) at the start of each row: {min(loads):.1f} to "
                     f"{max(loads):.1f}, median {statistics.median(loads):.1f} (2 cores shared "
                     "with compiles: rates are noisy; ratios are of rows run minutes apart)")
    lines += [f"- tree: {setup['tree']}: {setup['files']:,} files, {setup['bytes'] / 1e6:.1f} MB "
              f"of bytes, page-cache footprint as files {setup['footprint'] / 1e6:.1f} MB",
              "- stores: " + ", ".join(f"{names.get(k, k)} {v / 1e6:.1f} MB"
                                       for k, v in sizes.items())]
    for k, d in (setup.get("erofs_dump") or {}).items():
        argv = ((setup.get("made") or {}).get(k) or {})
        cmd = " ".join(argv["argv"][:-2]) if isinstance(argv, dict) else "(reused)"
        lines.append(f"- `{cmd}` ({names.get(k, k)}), `dump.erofs -S`: " + "; ".join(d["lines"]))
    lines += ["- one memory cgroup (v1) holds the daemon and the reader; per row: drop_caches, a "
              "fresh mount with default options, shuffled passes of open+read+close over every "
              "file (dsfs-readbench); 'vs ext4' = mean of passes 2..N over ext4's at the same "
              "limit and threads (hot rows: over the tmpfs copy's); OOM = kills in the cgroup "
              "(memory.oom_control); peak = memory.max_usage_in_bytes; daemon = its VmHWM; "
              "EROFS mounts: 'loop' = a read-only loop device, 'file-backed' = mount(2) on the "
              "image file (no loop device), 'direct I/O' = the loop's or EROFS's directio", ""]
    lines += target_lines(setup, reads, ifold)
    for lname, lbytes in limits:
        mine = [r for r in reads if r["limit"] == lname]
        if not mine:
            lines += [f"## limit {lname} = {lbytes / 1e6:.0f} MB: not run", ""]
            continue
        lines += [f"## limit {lname} = {lbytes / 1e6:.0f} MB", "",
                  "| reader | threads | files/s, passes 1..N | vs ext4 | OOM | peak MB | daemon MB "
                  "| load |", "|---|---|---|---|---|---|---|---|"]
        for v in mine:
            key, t = v["reader"], v["threads"]
            base = find(lname, "hot_tmpfs", t) if key.startswith("hot_") else find(lname, "ext4", t)
            h, hb = hot(v), hot(base) if base else None
            hwm = (v.get("daemon") or {}).get("VmHWM")
            load = f"{v['load']:.1f}" if "load" in v else "-"
            lines.append(f"| {label_of(setup, key)} | {t} | {cell(v)} | {ratio(h, hb)} | "
                         f"{v['oom_kills']} | {v['max_usage'] / 1e6:.0f} | "
                         f"{f'{hwm / 1e3:.0f}' if hwm else '-'} | {load} |")
        lines.append("")
    if ifold:
        lines += ["## The unmodified ImageFolder script (2 workers; the limit + the script's own "
                  f"peak, {own / 1e6:.0f} MB)" if own else "## The unmodified ImageFolder script",
                  "", "| limit | reader | epoch 1 images/s | epoch 2 images/s | OOM |",
                  "|---|---|---|---|---|"]
        for v in ifold:
            name = label_of(setup, v["reader"])
            if v.get("failed"):
                lines.append(f"| {v['limit']} | {name} | **failed**: "
                             f"{v['failed'][:80].replace('|', '/')} | | {v['oom_kills']} |")
            else:
                lines.append(f"| {v['limit']} | {name} | {v['epochs'][0]:,.0f} | "
                             f"{v['epochs'][1]:,.0f} | {v['oom_kills']} |")
        lines.append("")
    lines += [(f"Run time {run_s:.0f} s. " if run_s else "") + "Raw figures: the .jsonl beside "
              "this file; command: `bench/memory_bench.py " + setup.get("argv", "") + "`.", ""]
    md = jsonl[:-len(".jsonl")] + ".md"
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    subprocess.run([PY, os.path.join(LIB, "plot.py"), jsonl], check=False)


def binary_of(path, label):
    """What the report says of a dsfs binary: its path, mtime and its tree's commit."""
    tree = os.path.dirname(os.path.dirname(path))
    commit = sh(["git", "-C", tree, "log", "-1", "--format=%h %cI"]).stdout.strip()
    mtime = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(os.path.getmtime(path)))
    return {"path": path, "mtime": mtime, "commit": commit,
            "label": label or (commit.split()[0] if commit else os.path.basename(path))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--src", help="the tree (default: photo crops built under WORK)")
    ap.add_argument("--count", type=int, default=120000, help="photo crops to build without --src")
    ap.add_argument("--work", default=os.path.join(os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"),
                                                   "memory"))
    ap.add_argument("--reuse", action="store_true",
                    help="keep the stores and images WORK holds from an earlier run of the same tree")
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--dsfs-label", default="", help="its name in the report (default: its commit)")
    ap.add_argument("--dsfs-b", help="a second dsfs binary: readers classic_b and kernel_b")
    ap.add_argument("--dsfs-b-label", default="")
    ap.add_argument("--pack-b-opts", default="", help="more `pack` options for the second binary")
    ap.add_argument("--mount-b-opts", default="", help="more `mount` options for the second binary")
    ap.add_argument("--readbench", default=READBENCH)
    ap.add_argument("--limits", default="2x,1x,0.5x,store",
                    help="multiples of the page-cache footprint, 'store' (its size + 64 MiB) or sizes in MiB")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--hot-threads", default="4", help="threads of the hot rows ('' for none)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--readers", default="ext4,classic,classic_small,kernel,kernel_small,"
                    "kernel_loop,squashfuse,erofs,erofs_lz4hc,erofs_zstd",
                    help="keys: " + ", ".join([*READERS, *B_READERS]))
    ap.add_argument("--erofs-cluster", type=int, default=65536, help="mkfs.erofs-1.9 -C")
    ap.add_argument("--small-group", default="16K")
    ap.add_argument("--imagefolder-subset", type=int, default=20000, help="0: no ImageFolder runs")
    ap.add_argument("--imagefolder-limits", default="", help="the limits it runs at (default: all)")
    ap.add_argument("--desc", default=os.environ.get("DSFS_DESC", ""))
    ap.add_argument("--report", metavar="JSONL", help="only write the report of a results file")
    a = ap.parse_args()
    if a.report:
        report(os.path.abspath(a.report), a.desc)
        return 0
    readers = [r for r in a.readers.split(",") if r]
    bad = [r for r in readers if r not in READERS and r not in B_READERS]
    if bad:
        raise SystemExit(f"memory_bench: unknown readers {bad}; known: {[*READERS, *B_READERS]}")
    if any(r in B_READERS for r in readers) and not a.dsfs_b:
        raise SystemExit("memory_bench: classic_b and kernel_b need --dsfs-b")
    if a.dsfs_b and not any(r in B_READERS for r in readers):
        readers += list(B_READERS)
    a.dsfs, a.readbench = os.path.abspath(a.dsfs), os.path.abspath(a.readbench)
    a.dsfs_b = a.dsfs_b and os.path.abspath(a.dsfs_b)
    a.work = os.path.abspath(a.work)
    hot_threads = [int(t) for t in a.hot_threads.split(",") if t]
    os.makedirs(a.work, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = os.path.join(results_dir("memory"), f"memory-{stamp}")
    t_start = time.monotonic()
    hot_keys = [k for k in HOT if k != "kernel_b" or a.dsfs_b] if hot_threads else []
    paths, made = prepare(a, readers + hot_keys)
    files, nbytes, fp = footprint(paths["src"])
    sizes = {k: size_of(paths[k]) for k in ("default", "default_b", "small", "sqfs", *EROFS_IMAGES)
             if os.path.exists(paths[k]) and k in made}
    dumps = {k: erofs_dump(paths[k]) for k in EROFS_IMAGES if k in made}
    limits = []
    for x in a.limits.split(","):
        if x == "store":
            limits.append(("store+64M", sizes["default"] + 64 * MIB))
        elif x.endswith("x"):
            limits.append((x, int(fp * float(x[:-1]))))
        else:
            limits.append((f"{x}M", int(x) * MIB))
    limits.sort(key=lambda l: -l[1])
    threads = [int(t) for t in a.threads.split(",")]
    bins = {"a": binary_of(a.dsfs, a.dsfs_label)}
    if a.dsfs_b:
        bins["b"] = binary_of(a.dsfs_b, a.dsfs_b_label or "B")
    jsonl = open(out + ".jsonl", "w")

    def emit(row):
        jsonl.write(json.dumps(row) + "\n")
        jsonl.flush()
        print(f"[{time.strftime('%H:%M:%S')}] {row}", flush=True)

    commit = sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]).stdout.strip()
    emit({"kind": "setup", "tree": paths["src"], "files": files, "bytes": nbytes, "footprint": fp,
          "sizes": sizes, "limits": dict(limits), "commit": commit, "dsfs": bins,
          "erofs_dump": dumps, "made": made, "load": os.getloadavg(),
          "labels": labels_of(a, [*readers, *hot_keys], dumps, bins),
          "argv": " ".join(shlex.quote(x) for x in sys.argv[1:])})
    for k, d in dumps.items():
        print(f"memory_bench: {k}: " + "; ".join(d["lines"]), flush=True)
    cg = Cgroup()
    done = set()
    try:
        for lname, lbytes in limits:
            base = {"limit": lname, "limit_bytes": lbytes}
            for key in readers:
                if key == "tmpfs":
                    continue  # a hot row only
                for t in threads:
                    measure(cg, a, paths, lbytes, key, t, emit, {**base, "reader": key})
                    done.add((lname, key, t))
            if lbytes == limits[0][1]:
                for key in hot_keys:
                    for t in hot_threads:
                        if (lname, key, t) not in done:
                            measure(cg, a, paths, lbytes, key, t, emit,
                                    {**base, "reader": "hot_" + key})
        ifold_limits = a.imagefolder_limits.split(",") if a.imagefolder_limits else None
        if a.imagefolder_subset:
            drop_caches()
            cg.limit(0)
            imagefolder(cg, a, paths["src"], 512, epochs=1)
            own = int(cg.read("memory.max_usage_in_bytes"))
            emit({"kind": "imagefolder_own", "max_usage": own})
            for lname, lbytes in limits:
                if ifold_limits and lname not in ifold_limits:
                    continue
                for key in ("ext4", "classic", "kernel", *(B_READERS if a.dsfs_b else ())):
                    spec, dsfs = spec_of(a, key)
                    drop_caches()
                    cg.limit(lbytes + own)
                    kills = cg.oom_kills()
                    row = {"kind": "imagefolder", "limit": lname, "limit_bytes": lbytes + own,
                           "reader": key, "load": os.getloadavg()[0]}
                    try:
                        with Reader(spec, cg, a, paths, dsfs) as root:
                            row.update(imagefolder(cg, a, root, a.imagefolder_subset))
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        row["failed"] = f"mount: {e}"
                    row["oom_kills"] = cg.oom_kills() - kills
                    row["max_usage"] = int(cg.read("memory.max_usage_in_bytes"))
                    emit(row)
    finally:
        cg.remove()
        if is_mounted(paths["tmpfs"]):
            sh(["umount", paths["tmpfs"]])
        jsonl.close()

    report(out + ".jsonl", a.desc, time.monotonic() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
