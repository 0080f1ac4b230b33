#!/usr/bin/python3
"""Charts of the measurements: bench/results/KIND/*.jsonl -> SVG beside them.

  /usr/bin/python3 bench/lib/plot.py [--results bench/results] [FILE.jsonl ...]

For every results file of a kind it knows (core-*, views-*, kernel-*, backends-*,
sample-costs-*, gpu-*, memory-*) it writes FILE.svg next to FILE.jsonl; it also writes
headline.svg, the chart the README shows (the newest full core run and the newest views run,
photo32), in bench/results/ itself. With FILE arguments only those files' charts (and the
headline) are drawn. Every chart names the machine, the data set, the date and, where the run
recorded one, the commit, taken from the results (the .md report written beside each .jsonl
holds the machine and the build). An SVG names its sources by file name alone: beside it, or
for the headline in core/ and views/.

The SVGs are deterministic (fixed hash salt, no date, text kept as text) so that drawing again
from the same data changes no byte. Each SVG's metadata names its sources with their sha256:
tests/checks/docs_test.py checks those against the .jsonl files, so a chart older than its data fails
the test on any checkout (file times mean nothing on a fresh clone).

The benchmark scripts call this at their end; it needs python3-matplotlib (scripts/setup.sh).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import statistics
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot: error: python3-matplotlib is not installed (bash scripts/setup.sh)")

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASETS = {
    "photo32": "photo32: 150,000 32x32 JPEG photo crops, 100 classes",
    "fmnist": "fmnist: Fashion-MNIST, 70,000 28x28 PNGs, 10 classes",
}
SYS_NAMES = {"ext4": "ext4\n(source)", "tmpfs": "tmpfs\ncopy", "sqfs": "squashfuse_ll",
             "dsfs": "dsfs"}
COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]


def setup():
    plt.rcParams.update({
        "svg.hashsalt": "dsfs-bench-plot",  # fixed ids: the same data draws the same bytes
        "svg.fonttype": "none",             # text as text, not glyph paths
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def stamp_of(path):
    m = re.search(r"(\d{8})-(\d{4,6})", os.path.basename(path))
    if not m:
        return ""
    d, t = m.group(1), m.group(2)
    return f"{d[:4]}-{d[4:6]}-{d[6:]} {t[:2]}:{t[2:4]} UTC"


def run_info(path):
    """Machine and commit as the report beside the .jsonl records them."""
    md = path[:-len(".jsonl")] + ".md"
    machine, commit = "machine not recorded", ""
    if os.path.exists(md):
        with open(md) as f:
            text = f.read()
        m = re.search(r"^- machine: (.*)$", text, re.M)
        if m:
            machine = m.group(1).split(";")[0].strip()
            machine = re.sub(r", Debian GNU/Linux 12 \(bookworm\)", ", Debian 12", machine)
        m = (re.search(r"build of (?:commit )?([0-9a-f]{7,40})", text)
             or re.search(r"\bmain ([0-9a-f]{7,40})", text)
             or re.search(r"repo at ([0-9a-f]{7,40})", text))
        if m:
            commit = m.group(1)[:7]
    return machine, commit


def caption(paths, datasets):
    lines = []
    for p in paths:
        machine, commit = run_info(p)
        lines.append(f"{os.path.basename(p)}: {stamp_of(p)}; {machine}"
                     + (f"; commit {commit}" if commit else ""))
    lines += [DATASETS.get(d, d) for d in datasets]
    return "\n".join(lines)


def save(fig, out, sources, note):
    fig.text(0.01, 0.005, note, fontsize=7, va="bottom", ha="left", color="#444444")
    desc = "sources: " + " ".join(f"{os.path.basename(s)} sha256:{sha256(s)}" for s in sources)
    # Creator: the name every committed chart carries (this file's before bench/lib/); another
    # would change the bytes of every chart drawn again.
    fig.savefig(out, format="svg", metadata={
        "Date": None, "Creator": "bench/plot.py", "Description": desc,
        "Title": os.path.basename(out)})
    plt.close(fig)
    print(f"plot: {os.path.relpath(out, REPO)}")


def bars(ax, labels, series, log=False, unit=""):
    """Grouped bars: series is [(name, [value or None per label])]."""
    n = len(series)
    width = 0.8 / max(n, 1)
    for i, (name, vals) in enumerate(series):
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(labels))]
        ys = [v if v is not None else 0 for v in vals]
        rects = ax.bar(xs, ys, width * 0.95, label=name, color=COLORS[i % len(COLORS)])
        for r, v in zip(rects, vals):
            text = "n/a" if v is None else fmt(v)
            ax.annotate(text, (r.get_x() + r.get_width() / 2, max(r.get_height(), 1e-9)),
                        ha="center", va="bottom", fontsize=6.5, xytext=(0, 1),
                        textcoords="offset points")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7.5)
    if log:
        ax.set_yscale("log")
    if unit:
        ax.set_ylabel(unit)
    if n > 1:
        ax.legend(fontsize=7, frameon=False)


def fmt(v):
    if v >= 100000:
        return f"{v / 1000:.0f}k"
    if v >= 1000:
        return f"{v / 1000:.1f}k"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.2g}" if v < 10 else f"{v:.1f}"


# --- core-*.jsonl (bench/core_bench.sh) ---------------------------------------------------

def core_index(rows):
    idx = {}
    for r in rows:
        idx.setdefault((r.get("ds"), r.get("sys"), r.get("metric")), r.get("data"))
    return idx


def core_epochs(idx, ds, sys_):
    data = idx.get((ds, sys_, "imagefolder"))
    if not isinstance(data, list):
        return None, None
    ep = {e.get("epoch"): e.get("images_per_s") for e in data if e.get("event") == "epoch"}
    return ep.get(1), ep.get(2)


def passes_rate(data):
    if not isinstance(data, list) or not data:
        return None
    return statistics.median(p["files_per_s"] for p in data if "files_per_s" in p)


def core_datasets(idx):
    return [d for d in DATASETS if (d, "ext4", "files") in idx]


def plot_core(path):
    idx = core_index(load(path))
    dss = core_datasets(idx)
    if not dss:
        return None
    systems = ["ext4", "tmpfs", "sqfs", "dsfs"]
    fig, axes = plt.subplots(len(dss), 3, figsize=(11, 3.2 * len(dss) + 0.9), squeeze=False)
    for row, ds in enumerate(dss):
        ax = axes[row][0]
        e1, e2 = zip(*[core_epochs(idx, ds, s) for s in systems])
        bars(ax, [SYS_NAMES[s] for s in systems], [("epoch 1 (cold)", list(e1)),
                                                   ("epoch 2", list(e2))], unit="images/s")
        ax.set_title(f"{ds}: unmodified ImageFolder, images/s", fontsize=9)
        ax = axes[row][1]
        touch = ["ext4", "sqfs", "dsfs"]
        bars(ax, [SYS_NAMES[s] for s in touch], [
            ("after find, 4 threads", [passes_rate(idx.get((ds, s, "read_first_find_t4")))
                                       for s in touch]),
            ("after find, 1 thread", [passes_rate(idx.get((ds, s, "read_first_find_t1")))
                                      for s in touch]),
            ("without find, 4 threads", [passes_rate(idx.get((ds, s, "read_first_nofind_t4")))
                                         for s in touch])], unit="files/s")
        ax.set_title(f"{ds}: first touch after drop_caches, files/s", fontsize=9)
        ax = axes[row][2]
        size = [idx.get((ds, s, "size_bytes")) for s in systems]
        pack = [idx.get((ds, "tmpfs", "copy_s")), idx.get((ds, "sqfs", "pack_s")),
                idx.get((ds, "dsfs", "pack_s"))]
        ax.bar(range(4), [(v or 0) / 1e6 for v in size], 0.6, color=COLORS[0])
        for j, v in enumerate(size):
            ax.annotate("n/a" if v is None else f"{v / 1e6:.1f} MB", (j, (v or 0) / 1e6),
                        ha="center", va="bottom", fontsize=6.5)
        ax.set_xticks(range(4))
        ax.set_xticklabels([SYS_NAMES[s] for s in systems], fontsize=7.5)
        ax.set_ylabel("size on disk (MB)")
        tw = ax.twinx()
        tw.plot([1, 2, 3], [v if v is not None else float("nan") for v in pack], "o",
                color=COLORS[3])
        for j, v in zip([1, 2, 3], pack):
            if v is not None:
                tw.annotate(f"{v:.1f} s", (j, v), xytext=(6, 0), textcoords="offset points",
                            fontsize=6.5, color=COLORS[3], va="center")
        tw.set_ylabel("pack / copy time (s), dots", color=COLORS[3])
        tw.set_ylim(bottom=0)
        ax.set_title(f"{ds}: store size (bars) and pack time (dots)", fontsize=9)
    fig.tight_layout(rect=(0, 0.12 if len(dss) == 1 else 0.07, 1, 1))
    out = path[:-len(".jsonl")] + ".svg"
    save(fig, out, [path], caption([path], dss))
    return out


# --- views-*.jsonl (bench/views_bench.py) -------------------------------------------------

VIEW_READERS = [
    ("imagefolder_ext4", "ImageFolder,\next4"),
    ("imagefolder_dsfs_original", "ImageFolder,\ndsfs original"),
    ("imagefolder_dsfs_bmp", "ImageFolder,\ndsfs bmp view"),
    ("imagefolder_dsfs_bmp_predecode", "ImageFolder, bmp\n(--predecode)"),
    ("tensor", "3-line loader,\ntensor view"),
]


def simple_index(rows):
    return {(r.get("ds"), r.get("metric")): r.get("data") for r in rows}


def plot_views(path):
    idx = simple_index(load(path))
    dss = [d for d in DATASETS if (d, "imagefolder_ext4") in idx]
    if not dss:
        return None
    fig, axes = plt.subplots(1, len(dss), figsize=(5.5 * len(dss), 3.8), squeeze=False)
    for i, ds in enumerate(dss):
        ax = axes[0][i]
        readers = [(k, n) for k, n in VIEW_READERS if (ds, k) in idx]
        bars(ax, [n for _, n in readers], [
            ("epoch 1 (cold)", [idx[(ds, k)].get("epoch1") for k, _ in readers]),
            ("epoch 2", [idx[(ds, k)].get("epoch2") for k, _ in readers])],
            log=True, unit="images/s (log scale)")
        ax.set_title(f"{ds}: images/s by reader", fontsize=9)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    out = path[:-len(".jsonl")] + ".svg"
    save(fig, out, [path], caption([path], dss))
    return out


# --- kernel-*.jsonl (bench/kernel_bench.py) -----------------------------------------------

KERNEL_READERS = [("ext4", "ext4"), ("ext4_bmp", "ext4,\nBMP copy"), ("classic", "dsfs FUSE"),
                  ("classic_bmp", "dsfs FUSE,\nbmp view"), ("kernel", "dsfs\n-o kernel"),
                  ("kernel_bmp", "dsfs -o kernel,\nbmp view"),
                  ("kernel_loop", "dsfs -o\nkernel=loop"), ("uring", "dsfs FUSE\nio_uring"),
                  ("uring_bmp", "dsfs io_uring,\nbmp view")]
KERNEL_FILES = [("ext4", "ext4"), ("tmpfs", "tmpfs copy"), ("classic", "dsfs FUSE"),
                ("kernel", "dsfs\n-o kernel")]


def plot_kernel(path):
    idx = simple_index(load(path))
    dss = [d for d in DATASETS if any((d, k) in idx for k, _ in KERNEL_READERS)]
    if not dss:
        return None
    files = [d for d in dss if (d, "files_ext4_t1") in idx]
    rows = 2 if files else 1
    fig, axes = plt.subplots(rows, len(dss), figsize=(7 * len(dss), 3.8 * rows), squeeze=False)
    for i, ds in enumerate(dss):
        readers = [(k, n) for k, n in KERNEL_READERS if (ds, k) in idx]
        bars(axes[0][i], [n for _, n in readers], [
            ("epoch 1 (cold)", [idx[(ds, k)].get("epoch1") for k, _ in readers]),
            ("epoch 2", [idx[(ds, k)].get("epoch2") for k, _ in readers])], unit="images/s")
        axes[0][i].set_title(f"{ds}: unmodified ImageFolder, images/s", fontsize=9)
        if rows == 2:
            ax = axes[1][i]
            if ds not in files:
                ax.axis("off")
                continue
            got = [(k, n) for k, n in KERNEL_FILES if (ds, f"files_{k}_t1") in idx]
            bars(ax, [n for _, n in got], [
                (f"{when}, {t} thread{'s' if t > 1 else ''}",
                 [idx[(ds, f"files_{k}_t{t}")].get(when) for k, _ in got])
                for t in (1, 4) for when in ("cold", "hot")], log=True, unit="files/s (log scale)")
            ax.set_title(f"{ds}: shuffled open+read+close, files/s", fontsize=9)
    fig.tight_layout(rect=(0, 0.14 / rows, 1, 1))
    out = path[:-len(".jsonl")] + ".svg"
    # A run over a smaller tree of the same kind (kernel_bench.py --photo-count) says its size.
    names = []
    for ds in dss:
        images = idx.get((ds, "ext4"), {}).get("images")
        known = re.search(r"([\d,]+) ", DATASETS.get(ds, ""))
        if images and known and int(known.group(1).replace(",", "")) != images:
            names.append(f"{ds}: a tree of {images:,} images of that kind")
        else:
            names.append(ds)
    save(fig, out, [path], caption([path], names))
    return out


# --- backends-*.jsonl (bench/backend_bench.py) --------------------------------------------

def plot_backends(path):
    idx = simple_index(load(path))
    dss = [d for d in DATASETS if (d, "lmdb_reads") in idx and (d, "rocksdb_reads") in idx]
    if not dss:
        return None
    keys = [("hot_1t", "hot, 1 thread"), ("hot_4t", "hot, 4 threads"),
            ("cold_1t", "first touch,\n1 thread"), ("cold_4t", "first touch,\n4 threads")]
    fig, axes = plt.subplots(1, len(dss), figsize=(6 * len(dss), 3.6), squeeze=False)
    for i, ds in enumerate(dss):
        bars(axes[0][i], [n for _, n in keys], [
            (b, [idx[(ds, f"{b}_reads")].get(k) for k, _ in keys]) for b in ("lmdb", "rocksdb")],
            log=True, unit="files/s (log scale)")
        axes[0][i].set_title(f"{ds}: shuffled reads by backend, files/s", fontsize=9)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    out = path[:-len(".jsonl")] + ".svg"
    save(fig, out, [path], caption([path], dss))
    return out


# --- sample-costs-*.jsonl (bench/sample_costs.py) -----------------------------------------

def plot_sample_costs(path):
    rows = [r for r in load(path) if "tree" in r]
    dss = [d for d in DATASETS if any(r["ds"] == d for r in rows)]
    if not dss:
        return None
    steps = [("open_read_default", "open+read"), ("decode", "PIL open+convert"),
             ("to_tensor", "ToTensor")]
    fig, axes = plt.subplots(1, len(dss), figsize=(6 * len(dss), 3.8), squeeze=False)
    for i, ds in enumerate(dss):
        ax = axes[0][i]
        trees = [r for r in rows if r["ds"] == ds]
        bottom = [0.0] * len(trees)
        for j, (k, name) in enumerate(steps):
            vals = [r.get(k, 0) for r in trees]
            ax.bar(range(len(trees)), vals, 0.6, bottom=bottom, label=name, color=COLORS[j])
            bottom = [b + v for b, v in zip(bottom, vals)]
        for j, r in enumerate(trees):
            ax.annotate(f"whole sample {r['sample']:.0f} us", (j, r["sample"]), ha="center",
                        va="bottom", fontsize=6.5)
            ax.plot([j - 0.3, j + 0.3], [r["sample"]] * 2, color="#333333", lw=0.8)
        ax.set_xticks(range(len(trees)))
        ax.set_xticklabels([r["tree"].replace(" (", "\n(").replace("'s files", "'s\nfiles")
                            for r in trees], fontsize=6.5)
        ax.set_ylabel("microseconds per sample, hot")
        ax.set_title(f"{ds}: where a sample's time goes", fontsize=9)
        ax.legend(fontsize=7, frameon=False, loc="upper left")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    out = path[:-len(".jsonl")] + ".svg"
    save(fig, out, [path], caption([path], dss))
    return out


# --- the README's chart -------------------------------------------------------------------

def full_core(path):
    idx = core_index(load(path))
    cfg = idx.get(("_", "run", "config")) or {}
    return (cfg.get("if_subset", 0) >= 20000 and cfg.get("photos", 0) >= 150000
            and all(core_epochs(idx, "photo32", s)[1] for s in ("ext4", "tmpfs", "sqfs", "dsfs")))


def plot_headline(results):
    cores = [p for p in sorted(glob.glob(os.path.join(results, "core", "core-*.jsonl")))
             if full_core(p)]
    views = [p for p in sorted(glob.glob(os.path.join(results, "views", "views-*.jsonl")))
             if ("photo32", "tensor") in simple_index(load(p))]
    if not cores or not views:
        return None
    core, view = cores[-1], views[-1]
    cidx, vidx = core_index(load(core)), simple_index(load(view))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.9), gridspec_kw={"width_ratios": [4, 5]})
    systems = ["ext4", "tmpfs", "sqfs", "dsfs"]
    e1, e2 = zip(*[core_epochs(cidx, "photo32", s) for s in systems])
    bars(a, [SYS_NAMES[s] for s in systems], [("epoch 1 (cold)", list(e1)),
                                              ("epoch 2", list(e2))], unit="images/s")
    a.set_title("the same ImageFolder script on each file system", fontsize=9)
    readers = [(k, n) for k, n in VIEW_READERS if ("photo32", k) in vidx]
    bars(b, [n for _, n in readers], [
        ("epoch 1 (cold)", [vidx[("photo32", k)].get("epoch1") for k, _ in readers]),
        ("epoch 2", [vidx[("photo32", k)].get("epoch2") for k, _ in readers])],
        log=True, unit="images/s (log scale)")
    b.set_title("dsfs's views (the tensor view: 3 lines instead of ImageFolder)", fontsize=9)
    fig.suptitle("photo32, images/s read and converted to tensors (2 DataLoader workers)",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    out = os.path.join(results, "headline.svg")
    save(fig, out, [core, view], caption([core, view], ["photo32"]))
    return out


# --- gpu-*.jsonl (bench/gpu/gpu_run.sh: bench/gpu/gpu_train.py's lines) -------------------

GPU_READERS = [("JPEG on local disk", "JPEG,\nlocal disk"), ("dsfs original tree", "dsfs\noriginal"),
               ("dsfs bmp view", "dsfs\nbmp view"),
               ("dsfs -o kernel original tree", "dsfs -o kernel\noriginal"),
               ("dsfs -o kernel,view=bmp", "dsfs -o kernel\nbmp view")]


def plot_gpu(path):
    rows = [r for r in load(path) if "images_per_s" in r and "label" in r]
    if not rows:
        return None
    by = {r["label"]: r["images_per_s"] for r in rows}
    gpu, ram = by.get("GPU alone"), by.get("whole tree in one tensor on the GPU")
    readers = [(k, n) for k, n in GPU_READERS
               if any(f"ImageFolder, {k}, {w} workers" in by for w in (16, 4))]
    fig, ax = plt.subplots(figsize=(8, 3.9))
    bars(ax, [n for _, n in readers], [
        (f"{w} workers", [by.get(f"ImageFolder, {k}, {w} workers") for k, _ in readers])
        for w in (16, 4)], unit="images/s")
    for value, name, style in ((gpu, "GPU alone", "--"), (ram, "whole tree in RAM", ":")):
        if value:
            ax.axhline(value, color="#444444", linestyle=style, linewidth=1)
            ax.annotate(f"{name}: {value:,.0f}", (len(readers) - 0.5, value), ha="right",
                        va="bottom", fontsize=7)
    ax.set_title("ResNet-18 (bf16) end to end, photo32 32x32, images/s", fontsize=9)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    out = path[:-len(".jsonl")] + ".svg"
    # The set carried to the host is a part of photo32: its report says which.
    md = path[:-len(".jsonl")] + ".md"
    what = "photo32 (a part of it: see the report beside this chart)"
    if os.path.exists(md):
        with open(md) as f:
            m = re.search(r"(\d[\d,]* photo32 images)", f.read())
        if m:
            what = m.group(1)
    save(fig, out, [path], caption([path], [what]))
    return out


def plot_memory(path):
    """bench/memory_bench.py: files/s of passes 2..N by memory limit, one panel per thread count."""
    rows = load(path)
    setup_row = next(r for r in rows if r["kind"] == "setup")
    reads = [r for r in rows if r["kind"] == "read" and not r["reader"].startswith("hot_")]
    limits = list(dict.fromkeys(r["limit"] for r in reads))
    readers = list(dict.fromkeys(r["reader"] for r in reads))
    threads = sorted({r["threads"] for r in reads})
    names = {"ext4": "ext4", "classic": "dsfs classic", "classic_small": "classic, small groups",
             "kernel": "dsfs -o kernel", "kernel_small": "-o kernel, small groups",
             "kernel_loop": "-o kernel=loop", "squashfuse": "squashfuse_ll",
             "erofs": "EROFS 1.5 inline, loop", **setup_row.get("labels", {})}

    def rate(r):
        if r.get("failed") or any(r["errors"]) or len(r["files_per_s"]) < 2:
            return None
        return statistics.mean(r["files_per_s"][1:])

    fig, axes = plt.subplots(len(threads), 1, figsize=(11, 3.6 * len(threads)), squeeze=False)
    for i, t in enumerate(threads):
        ax = axes[i][0]
        series = []
        for key in readers:
            vals = []
            for lim in limits:
                r = next((x for x in reads if x["reader"] == key and x["limit"] == lim
                          and x["threads"] == t), None)
                vals.append(rate(r) if r else None)
            series.append((names.get(key, key), vals))
        mb = setup_row["limits"]
        bars(ax, [f"limit {l}\n{mb[l] / 1e6:.0f} MB" for l in limits], series,
             unit="files/s, passes 2-3")
        ax.set_title(f"shuffled open+read+close inside a memory cgroup, {t} thread"
                     f"{'s' if t > 1 else ''} (n/a: failed reads or mount)", fontsize=9)
        ax.legend(fontsize=6.5, frameon=False, ncol=4, loc="upper right")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    out = path[:-len(".jsonl")] + ".svg"
    what = (f"{setup_row['files']:,} files, {setup_row['bytes'] / 1e6:.0f} MB, page-cache "
            f"footprint {setup_row['footprint'] / 1e6:.0f} MB, dsfs store "
            f"{setup_row['sizes']['default'] / 1e6:.0f} MB")
    save(fig, out, [path], caption([path], [what]))
    return out


KINDS = [("core-", plot_core), ("views-", plot_views), ("kernel-", plot_kernel),
         ("backends-", plot_backends), ("sample-costs-", plot_sample_costs), ("gpu-", plot_gpu),
         ("memory-", plot_memory)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(REPO, "bench", "results"))
    ap.add_argument("files", nargs="*", help="results files to draw (default: all)")
    args = ap.parse_args()
    setup()
    files = args.files or sorted(glob.glob(os.path.join(args.results, "*", "*.jsonl")))
    for path in files:
        for prefix, fn in KINDS:
            if os.path.basename(path).startswith(prefix):
                try:
                    fn(path)
                except (KeyError, TypeError, ValueError) as e:
                    print(f"plot: {os.path.basename(path)}: skipped ({e!r})", file=sys.stderr)
    plot_headline(args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
