#!/usr/bin/python3
"""Turns the raw figures of bench/core_bench.sh (a .jsonl file) into a Markdown report.

  /usr/bin/python3 bench/report.py RESULTS.jsonl [--work DIR] [--repo DIR] [--out FILE.md] [--log FILE]

Each input line is {"ds", "sys", "metric", "data", "note"}; data holds a number, a string, or the
JSON lines that dsfs-readbench / imagefolder_read.py printed. Hot read figures are the median of
the passes after the first (warm) one; cold figures are the single pass after drop_caches.
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
}


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


def machine(work, repo):
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl")
    ap.add_argument("--work", default="/var/tmp/dsfs-bench")
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--out")
    ap.add_argument("--log", default="")
    a = ap.parse_args()

    recs, notes = load(a.jsonl)
    errors = []

    def first(ds, sys, metric):
        v = recs.get((ds, sys, metric))
        return v[-1] if v else None

    def read_fig(ds, sys, metric, which):
        """files/s from a dsfs-readbench run: 'hot' = median of passes >= 2, 'first', 'cold'."""
        lines = first(ds, sys, metric)
        if not isinstance(lines, list) or not lines:
            return None
        err = sum(l.get("errors", 0) for l in lines)
        if err:
            errors.append(f"{ds}/{sys} {metric}: {err} errors "
                          f"({next((l['first_error'] for l in lines if 'first_error' in l), '')})")
        if which == "hot":
            rest = [l["files_per_s"] for l in lines if l.get("pass", 1) >= 2]
            v = statistics.median(rest) if rest else lines[-1]["files_per_s"]
        else:
            v = lines[0]["files_per_s"]
        return v

    def imagefolder(ds, sys, what):
        lines = first(ds, sys, "imagefolder")
        if not isinstance(lines, list):
            return None
        for l in lines:
            if what == "scan" and l.get("event") == "scan":
                return l["scan_s"]
            if what.startswith("epoch") and l.get("event") == "epoch" and l["epoch"] == int(what[5:]):
                return l["images_per_s"]
        return None

    def num(ds, sys, metric):
        v = first(ds, sys, metric)
        return v if isinstance(v, (int, float)) else None

    def median_of(ds, sys, metric):
        v = [x for x in recs.get((ds, sys, metric), []) if isinstance(x, (int, float))]
        return statistics.median(v) if v else None

    config = first("_", "run", "config") or {}
    dsfs_state = first("_", "dsfs", "state") or "?"
    m = machine(a.work, a.repo)
    stamp = os.path.basename(a.jsonl).replace("core-", "").replace(".jsonl", "")

    out = []
    out.append(f"# dsfs core benchmark, {stamp}")
    out.append("")
    out.append(f"- machine: {m['nproc']} CPUs ({m['cpu']}), {m['ram']} RAM, kernel {m['kernel']}, {m['os']}")
    out.append(f"- disk of the work dir: {m['disk']}")
    out.append(f"- packages: {m['packages']}")
    binary = first("_", "dsfs", "binary")
    if isinstance(binary, dict):
        dsfs_state += f" ({binary.get('path')}, {binary.get('version')}, built {binary.get('built')})"
    out.append(f"- dsfs: {dsfs_state}; repo at {m['commit']} when the report was written")
    if config:
        out.append(f"- settings: hot = median of {config.get('hot_passes')} passes after a warm one; "
                   f"cold = one pass after `sync; echo 3 > /proc/sys/vm/drop_caches` with the FUSE daemon "
                   f"restarted{'' if not config.get('cold_limit') else ', first %d files of the shuffled list' % config['cold_limit']}; "
                   f"ImageFolder: 2 workers, batch 256, {config.get('if_epochs')} epochs of "
                   f"{config.get('if_samples') or 'all'} images; "
                   f"dsfs pack options `{config.get('dsfs_pack_opts') or '(none)'}`, mount options "
                   f"`{config.get('dsfs_mount_opts') or '(none)'}`")
    total = num("_", "run", "total_s")
    if total:
        out.append(f"- measuring took {total / 60:.1f} min")
    out.append("")

    datasets = [d for d in dict.fromkeys(k[0] for k in recs) if d != "_"]
    for ds in datasets:
        files = num(ds, "ext4", "files")
        nbytes = num(ds, "ext4", "bytes")
        title = f"## {ds}"
        if files:
            title += f": {files:,} files, {nbytes / 1e6:.1f} MB of file data"
        if ds in DATASET_DESC:
            title += f" ({DATASET_DESC[ds]})"
        out.append(title)
        out.append("")
        la, lb = first(ds, "_", "loadavg"), first(ds, "_", "loadavg_end")
        if la:
            out.append(f"Load average (1/5/15 min) when this data set started: {la}; when it ended: {lb or '?'}. "
                       "Other work on the machine shows up here and makes the figures noisier.")
            out.append("")
        rows = []

        def size_cell(sys):
            v = num(ds, sys, "size_bytes")
            if v is None:
                return None, None
            txt = f"{v / 1e6:.1f} MB"
            if nbytes:
                txt += f" ({v / nbytes:.3f})"
            return txt, v

        def mk(label, getter, fmt, higher_better=True):
            cells, vals = [], {}
            for sys, _ in SYSTEMS:
                v = getter(sys)
                vals[sys] = v
                cells.append(fmt(v) if v is not None else "—")
            rows.append((label, cells, vals, higher_better))

        # sizes: on-disk bytes; source = du (allocated blocks), tmpfs = df used
        cells, vals = [], {}
        for sys, _ in SYSTEMS:
            txt, v = size_cell(sys)
            cells.append(txt or "—")
            vals[sys] = v
        rows.append(("size on disk, MB (/ file bytes)", cells, vals, False))
        mk("pack s (tmpfs: `cp -a`)",
           lambda s: num(ds, s, "copy_s") if s == "tmpfs" else num(ds, s, "pack_s"), fmt_s, False)
        mk("mount s, store file cached", lambda s: num(ds, s, "mount_s"), fmt_s, False)
        mk("mount s, after drop_caches (median)", lambda s: median_of(ds, s, "mount_cold_s"), fmt_s, False)
        mk("read files/s, 4 threads, hot", lambda s: read_fig(ds, s, "read_hot_t4", "hot"), fmt_rate)
        mk("read files/s, 1 thread, hot", lambda s: read_fig(ds, s, "read_hot_t1", "hot"), fmt_rate)
        mk("read files/s, 4 threads, first pass after mount (store file cached)",
           lambda s: read_fig(ds, s, "read_hot_t4", "first") if s in ("sqfs", "dsfs") else None, fmt_rate)
        mk("read files/s, 4 threads, cold", lambda s: read_fig(ds, s, "read_cold_t4", "cold"), fmt_rate)
        mk("read files/s, 1 thread, cold", lambda s: read_fig(ds, s, "read_cold_t1", "cold"), fmt_rate)
        mk("lstat files/s, 4 threads, hot", lambda s: read_fig(ds, s, "stat_hot_t4", "hot"), fmt_rate)
        mk("ImageFolder scan s", lambda s: imagefolder(ds, s, "scan"), fmt_s, False)
        for e in range(1, int(config.get("if_epochs") or 2) + 1):
            mk(f"ImageFolder images/s, epoch {e}", lambda s, e=e: imagefolder(ds, s, f"epoch{e}"), fmt_rate)

        head = ["", *[name for _, name in SYSTEMS], "dsfs / squashfuse", "dsfs / ext4"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for label, cells, vals, _hb in rows:
            ratios = []
            for other in ("sqfs", "ext4"):
                d, o = vals.get("dsfs"), vals.get(other)
                ratios.append(f"{d / o:.2f}x" if d is not None and o else "—")
            out.append("| " + " | ".join([label, *cells, *ratios]) + " |")
        info = first(ds, "dsfs", "info")
        if isinstance(info, dict):
            out.append("")
            out.append(f"`dsfs info --json`: `{json.dumps(info)}`")
        out.append("")

    if errors or notes:
        out.append("## Notes")
        out.append("")
        for n in errors + notes:
            out.append(f"- {n}")
        out.append("")
    out.append("## How it was measured")
    out.append("")
    out.append("- `bench/core_bench.sh` (raw figures: `" + os.path.basename(a.jsonl) + "`"
               + (f", log `{a.log}`" if a.log else "") + ")")
    out.append("- squashfs: `mksquashfs SRC IMG -comp zstd -noappend -quiet -no-progress` (128 KiB blocks), "
               "mounted with `squashfuse_ll -f IMG MNT` (timed until `mountpoint` answers)")
    out.append("- dsfs: `dsfs pack SRC STORE --force`, `dsfs mount STORE MNT` (timed until it returns)")
    out.append("- reads: `dsfs-readbench ROOT --list LIST --threads N --passes P`: the same shuffled list "
               "(seed 42) on every system, open + read to EOF + close per file")
    out.append("- ImageFolder: `bench/imagefolder_read.py ROOT --workers 2 --batch 256` "
               "(torchvision ImageFolder + ToTensor, DataLoader shuffle); an epoch's time includes worker start")
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
