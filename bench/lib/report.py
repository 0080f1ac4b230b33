#!/usr/bin/python3
"""Turns the raw figures of bench/core_bench.sh (a .jsonl file) into a Markdown report.

  /usr/bin/python3 bench/lib/report.py RESULTS.jsonl [--work DIR] [--repo DIR] [--out FILE.md] [--log FILE]

Each input line is {"ds", "sys", "metric", "data", "note"}; data holds a number, a string, or the
JSON lines that dsfs-readbench / imagefolder_read.py printed. Hot read figures are the median of
the passes after the first (warm) one; first-touch figures are the single pass after drop_caches.
The targets section checks bench/lib/targets.json (or --targets FILE) against the measured ratios.
Other bench scripts import machine_lines() for their report headers.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
from collections import defaultdict

SYSTEMS = [("ext4", "ext4 (source dir)"), ("tmpfs", "tmpfs copy"),
           ("sqfs", "squashfuse_ll"), ("dsfs", "dsfs")]
DATASET_DESC = {
    "fmnist": "Fashion-MNIST, 28x28 grayscale PNG",
    "photo32": "32x32 JPEG crops of real photographs",
    "seq1g": "one file: the photo32 JPEGs and Fashion-MNIST PNGs concatenated, reshuffled each round",
}


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


def machine(work, repo):
    """The machine and the repo's commit (BENCH_GIT_REPO names the repo when the scripts run
    from a copy of bench/)."""
    repo = os.environ.get("BENCH_GIT_REPO") or repo
    info = {}
    info["kernel"] = platform.release()
    info["nproc"] = os.cpu_count()
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu"] = cpu or sh("lscpu | sed -n 's/^Model name: *//p'")
    try:
        with open("/proc/meminfo") as f:
            mem = {l.split(":")[0]: l.split(":")[1].strip() for l in f}
        info["ram"] = f"{int(mem['MemTotal'].split()[0]) / 2**20:.1f} GiB"
    except (OSError, KeyError, ValueError):
        info["ram"] = "?"
    src = sh(f"findmnt -no SOURCE,FSTYPE,OPTIONS -T {work}")
    info["disk"] = src
    dev = src.split()[0] if src else ""
    if dev.startswith("/dev/"):
        blk = sh(f"lsblk -dno NAME,SIZE,ROTA,MODEL {dev}")
        if blk:
            info["disk"] += f" ({blk}; ROTA=1 means rotational as the kernel reports it)"
    info["os"] = sh(". /etc/os-release && echo $PRETTY_NAME")
    pkgs = ["fuse3", "libfuse3-3", "squashfs-tools", "squashfuse", "liblmdb0", "libzstd1",
            "python3-torch", "python3-torchvision", "python3-pil"]
    info["packages"] = ", ".join(
        f"{p} {v}" for p in pkgs
        if (v := sh(f"dpkg-query -W -f='${{Version}}' {p} 2>/dev/null")))
    head = sh(f"git -C {repo} rev-parse --short HEAD 2>/dev/null")
    dirty = sh(f"git -C {repo} status --porcelain 2>/dev/null")
    info["commit"] = (head or "no commit") + (" + uncommitted changes" if dirty else "")
    return info


def machine_lines(work, repo):
    """The Markdown bullet lines that describe the machine (for every bench report)."""
    m = machine(work, repo)
    return [f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['ram']} RAM, kernel {m['kernel']}, {m['os']}",
            f"- disk of the work dir: {m['disk']}",
            f"- packages: {m['packages']}",
            f"- repo at {m['commit']} when the report was written"]


def load(path):
    recs = defaultdict(list)
    notes = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            recs[(r["ds"], r["sys"], r["metric"])].append(r.get("data"))
            if r.get("note"):
                notes.append(f"{r['ds']}/{r['sys']} {r['metric']}: {r['note']}")
    return recs, notes


def fmt_rate(v):
    if v is None:
        return None
    return f"{v / 1000:.1f}k" if v >= 1000 else f"{v:.0f}"


def fmt_s(v):
    if v is None:
        return None
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def fmt_mb(v):
    return None if v is None else f"{v:.1f}"


class Figures:
    """The measured figures of one run, by (data set, system, metric key)."""

    def __init__(self, recs):
        self.recs = recs
        self.errors = []

    def last(self, ds, sys, metric):
        v = self.recs.get((ds, sys, metric))
        return v[-1] if v else None

    def num(self, ds, sys, metric):
        v = self.last(ds, sys, metric)
        return v if isinstance(v, (int, float)) else None

    def median_of(self, ds, sys, metric):
        v = [x for x in self.recs.get((ds, sys, metric), []) if isinstance(x, (int, float))]
        return statistics.median(v) if v else None

    def passes(self, ds, sys, metric):
        lines = self.last(ds, sys, metric)
        if not isinstance(lines, list) or not lines:
            return None
        err = sum(l.get("errors", 0) for l in lines)
        if err:
            self.errors.append(f"{ds}/{sys} {metric}: {err} errors "
                               f"({next((l['first_error'] for l in lines if 'first_error' in l), '')})")
        return lines

    def read(self, ds, sys, metric, which, field="files_per_s"):
        """'hot' = median of passes >= 2 (a warm pass first), 'first' = the first pass."""
        lines = self.passes(ds, sys, metric)
        if not lines:
            return None
        if which == "hot":
            rest = [l[field] for l in lines if l.get("pass", 1) >= 2]
            return statistics.median(rest) if rest else lines[-1][field]
        return lines[0][field]

    def imagefolder(self, ds, sys, what):
        lines = self.last(ds, sys, "imagefolder")
        if not isinstance(lines, list):
            return None
        for l in lines:
            if what == "scan" and l.get("event") == "scan":
                return l["scan_s"]
            if what.startswith("epoch") and l.get("event") == "epoch" and l["epoch"] == int(what[5:]):
                return l["images_per_s"]
        return None

    def usage(self, ds, sys):
        u = [x for x in self.recs.get((ds, sys, "daemon_usage"), []) if isinstance(x, dict)]
        return u

    def get(self, ds, sys, key):
        """The figure behind a metric key (METRICS)."""
        if key == "size":
            return self.num(ds, sys, "size_bytes")
        if key == "pack_s":
            return self.num(ds, sys, "copy_s" if sys == "tmpfs" else "pack_s")
        if key == "mount_s":
            return self.num(ds, sys, "mount_s")
        if key == "mount_cold_s":
            return self.median_of(ds, sys, "mount_cold_s")
        if key in ("hot_t4", "hot_t1"):
            return self.read(ds, sys, "read_" + key, "hot")
        if key == "after_mount_t4":
            return self.read(ds, sys, "read_hot_t4", "first") if sys in ("sqfs", "dsfs") else None
        if key.startswith("first_"):
            return self.read(ds, sys, "read_" + key, "first")
        if key == "find_cold_s":
            return self.median_of(ds, sys, "find_cold_s")
        if key == "find_hot_s":
            return self.num(ds, sys, "find_hot_s")
        if key == "stat_t4":
            return self.read(ds, sys, "stat_hot_t4", "hot")
        if key == "if_scan_s":
            return self.imagefolder(ds, sys, "scan")
        if key.startswith("if_e"):
            return self.imagefolder(ds, sys, "epoch" + key[4:])
        if key == "cpu_s":
            u = self.usage(ds, sys)
            return sum(x.get("cpu_s") or 0 for x in u) if u else None
        if key == "hwm_mb":
            u = [x.get("hwm_kb") for x in self.usage(ds, sys) if x.get("hwm_kb")]
            return max(u) / 1024 if u else None
        if key == "seq_cold":
            return self.read(ds, sys, "seq_cold", "first", "mb_per_s")
        if key == "seq_hot":
            return self.read(ds, sys, "seq_hot", "hot", "mb_per_s")
        raise KeyError(key)


# (key, row label, format, higher is better, only for the big-file data set)
METRICS = [
    ("size", "size on disk, MB", None, False, None),
    ("pack_s", "pack s (tmpfs: `cp -a`)", fmt_s, False, None),
    ("mount_s", "mount s, store file cached", fmt_s, False, None),
    ("mount_cold_s", "mount s, after drop_caches (median)", fmt_s, False, None),
    ("hot_t4", "read files/s, 4 threads, hot", fmt_rate, True, False),
    ("hot_t1", "read files/s, 1 thread, hot", fmt_rate, True, False),
    ("after_mount_t4", "read files/s, 4 threads, first pass after mount (store file cached)", fmt_rate, True, False),
    ("first_find_t4", "first touch files/s, 4 threads, drop_caches + `find`", fmt_rate, True, False),
    ("first_find_t1", "first touch files/s, 1 thread, drop_caches + `find`", fmt_rate, True, False),
    ("first_nofind_t4", "first touch files/s, 4 threads, drop_caches, no find", fmt_rate, True, False),
    ("first_nofind_t1", "first touch files/s, 1 thread, drop_caches, no find", fmt_rate, True, False),
    ("find_cold_s", "`find` of the tree s, after drop_caches (median)", fmt_s, False, False),
    ("find_hot_s", "`find` of the tree s, hot", fmt_s, False, False),
    ("stat_t4", "lstat files/s, 4 threads, hot", fmt_rate, True, False),
    ("if_scan_s", "ImageFolder scan s (after drop_caches)", fmt_s, False, False),
    ("if_e1", "ImageFolder images/s, epoch 1 (after drop_caches)", fmt_rate, True, False),
    ("if_e2", "ImageFolder images/s, epoch 2 (same images)", fmt_rate, True, False),
    ("seq_cold", "sequential read MB/s, after drop_caches", fmt_mb, True, True),
    ("seq_hot", "sequential read MB/s, hot", fmt_mb, True, True),
    ("cpu_s", "daemon CPU s (utime+stime, all mounts of the data set)", fmt_s, False, None),
    ("hwm_mb", "daemon peak RSS MB (largest VmHWM of its mounts)", fmt_mb, False, None),
]


def targets_section(fig, datasets, path):
    try:
        with open(path) as f:
            targets = json.load(f)["targets"]
    except (OSError, ValueError, KeyError) as e:
        return [f"(no targets: {path}: {e})"]
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}
    out = ["| target | data set | measured | target | met? |", "|---|---|---|---|---|"]
    met = total = 0
    for t in targets:
        for ds in t.get("datasets") or datasets:
            (ns, nk), (dsys, dk) = t["num"], t["den"]
            a, b = fig.get(ds, ns, nk), fig.get(ds, dsys, dk)
            if a is None or not b:
                out.append(f"| {t['what']} | {ds} | — | {t['op']} {t['target']} | not measured |")
                continue
            r = a / b
            ok = ops[t["op"]](r, t["target"])
            met += ok
            total += 1
            out.append(f"| {t['what']} | {ds} | {r:.2f} | {t['op']} {t['target']} | {'yes' if ok else '**no**'} |")
    out.insert(0, f"{met} of {total} measured targets met (targets from `{os.path.relpath(path)}`).")
    out.insert(1, "")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--work", default="/var/tmp/dsfs-bench")
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    ap.add_argument("--out")
    ap.add_argument("--log", default="")
    ap.add_argument("--targets", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "targets.json"))
    a = ap.parse_args()

    recs, notes = load(a.jsonl)
    fig = Figures(recs)
    config = fig.last("_", "run", "config") or {}
    dsfs_state = fig.last("_", "dsfs", "state") or "?"
    stamp = os.path.basename(a.jsonl).replace("core-", "").replace(".jsonl", "")

    out = [f"# dsfs core benchmark, {stamp}", ""]
    out += machine_lines(a.work, a.repo)
    binary = fig.last("_", "dsfs", "binary")
    if isinstance(binary, dict):
        dsfs_state += (f" ({binary.get('path')}, {binary.get('version')}, "
                       f"{binary.get('build_type') or 'unknown build type'}, built {binary.get('built')})")
    desc = fig.last("_", "dsfs", "desc")
    out.append(f"- dsfs: {dsfs_state}" + (f"; {desc}" if desc else ""))
    if config:
        lim = config.get("cold_limit")
        out.append(f"- settings: hot = median of {config.get('hot_passes')} passes after a warm one; "
                   "first touch = one pass after `sync; echo 3 > /proc/sys/vm/drop_caches` with the FUSE "
                   "daemon restarted" + (f", the first {lim:,} files of the shuffled list" if lim else "")
                   + "; ImageFolder: 2 workers, batch 256, a cold start (drop_caches, daemon restarted), "
                   f"{config.get('if_epochs')} epochs over the same {config.get('if_subset') or 'all'} "
                   f"images; dsfs pack options `{config.get('dsfs_pack_opts') or '(none)'}`, mount options "
                   f"`{config.get('dsfs_mount_opts') or '(none)'}`")
    total = fig.num("_", "run", "total_s")
    if total:
        out.append(f"- measuring took {total / 60:.1f} min")
    out.append("")

    datasets = [d for d in dict.fromkeys(k[0] for k in recs) if d != "_"]
    small = [d for d in datasets if (fig.num(d, "ext4", "files") or 0) > 1]
    out.append("## Targets")
    out.append("")
    out += targets_section(fig, small, a.targets)
    out.append("")

    for ds in datasets:
        files = fig.num(ds, "ext4", "files")
        nbytes = fig.num(ds, "ext4", "bytes")
        big = files == 1
        title = f"## {ds}"
        if files:
            title += f": {files:,} file{'s' if files != 1 else ''}, {nbytes / 1e6:.1f} MB of file data"
        if ds in DATASET_DESC:
            title += f" ({DATASET_DESC[ds]})"
        out += [title, ""]
        la, lb = fig.last(ds, "_", "loadavg"), fig.last(ds, "_", "loadavg_end")
        if la:
            out.append(f"Load average (1/5/15 min) when this data set started: {la}; when it ended: {lb or '?'}.")
            out.append("")
        head = ["", *[name for _, name in SYSTEMS], "dsfs / squashfuse", "dsfs / ext4", "dsfs / tmpfs"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for key, label, fmt, _hb, only_big in METRICS:
            if only_big is not None and only_big != big:
                continue
            vals = {sys: fig.get(ds, sys, key) for sys, _ in SYSTEMS}
            if all(v is None for v in vals.values()):
                continue
            cells = []
            for sys, _ in SYSTEMS:
                v = vals[sys]
                if v is None:
                    cells.append("—")
                elif key == "size":
                    cells.append(f"{v / 1e6:.1f} MB" + (f" ({v / nbytes:.3f})" if nbytes else ""))
                else:
                    cells.append(fmt(v))
            ratios = []
            for other in ("sqfs", "ext4", "tmpfs"):
                d, o = vals.get("dsfs"), vals.get(other)
                ratios.append(f"{d / o:.2f}x" if d is not None and o else "—")
            out.append("| " + " | ".join([f"{label}", *cells, *ratios]) + " |")
        if nbytes:
            out.append("")
            out.append("Sizes: source = `du` (allocated blocks), tmpfs = `df` used, images = file size; "
                       "in brackets / file bytes.")
        for sys in ("sqfs", "dsfs"):
            u = fig.usage(ds, sys)
            if u:
                out.append("")
                out.append(f"{dict(SYSTEMS)[sys]} daemons (phase: CPU s, peak RSS MB): " + "; ".join(
                    f"{x.get('phase') or '?'}: {x.get('cpu_s')}, {(x.get('hwm_kb') or 0) / 1024:.0f}"
                    for x in u))
        info = fig.last(ds, "dsfs", "info")
        if isinstance(info, dict):
            out.append("")
            out.append(f"`dsfs info --json`: `{json.dumps(info)}`")
        out.append("")

    if fig.errors or notes:
        out += ["## Notes", ""]
        out += [f"- {n}" for n in fig.errors + notes]
        out.append("")
    out += ["## How it was measured", ""]
    out.append("- `bench/core_bench.sh` (raw figures: `" + os.path.basename(a.jsonl) + "`"
               + (f", log `{a.log}`" if a.log else "") + ")")
    out.append("- squashfs: `mksquashfs SRC IMG -comp zstd -noappend -quiet -no-progress` (128 KiB blocks), "
               "mounted with `squashfuse_ll -f IMG MNT` (timed until `mountpoint` answers)")
    out.append("- dsfs: `dsfs pack SRC STORE --force`, `dsfs mount STORE MNT` (timed until it returns)")
    out.append("- reads: `dsfs-readbench ROOT --list LIST --threads N --passes P`: the same shuffled list "
               "(seed 42) on every system, open + read to EOF + close per file; sequential: "
               "`dsfs-readbench --seq FILE` (1 MiB reads)")
    out.append("- first touch with find: drop_caches (daemon restarted), `find ROOT`, then the read pass; "
               "without find: the read pass right away (every file is looked up by path)")
    out.append("- ImageFolder: `bench/lib/imagefolder_read.py ROOT --workers 2 --batch 256 --subset N` "
               "(torchvision ImageFolder + ToTensor; the scan lists the whole tree, then each epoch reads "
               "the same N random images in a new order); an epoch's time includes worker start")
    out.append("- daemon CPU and RSS: utime+stime from /proc/PID/stat and VmHWM from /proc/PID/status of "
               "each FUSE daemon just before its unmount, summed (CPU) or maxed (RSS) over the data set's mounts")
    out.append("- ratio columns divide the dsfs figure by the peer's: above 1 is better for rates, "
               "below 1 for sizes and seconds")
    text = "\n".join(out) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text, end="")


if __name__ == "__main__":
    main()
