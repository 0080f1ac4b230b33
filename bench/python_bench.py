#!/usr/bin/python3
"""The Python module against the files, side by side in one run (issue 41's targets).

  flock /work/bench.lock /usr/bin/python3 bench/python_bench.py --dsfs build/dsfs \\
      --photo /data/photo32 --fmnist /data/fmnist [--work DIR] [--epochs 2] [--workers 2]

For each tree (photo crops: bench/lib/datasets.py photo-crops, 150,000 by default; Fashion-MNIST:
datasets.py fashion-mnist) it packs a store (kept in --work) and reads the tree with the
unmodified ImageFolder script (ImageFolder(root, transform=ToTensor()), DataLoader(shuffle=True,
batch_size=256, num_workers=2), as bench/lib/imagefolder_read.py) and its one-import change:

  ext4            torchvision's ImageFolder over the tree (epoch 2: hot, in the page cache)
  dsfs            dsfs.torch.ImageFolder over the store (no mount)
  kernel          torchvision's ImageFolder over `dsfs mount -o kernel` (root; EROFS)
  dsfs-pixels     dsfs.torch.PixelImageFolder (the views' pixels: decoded in C++, kept)
  dsfs-pixels-predecode  the same over a store packed with --predecode (no decode at all)
  ext4-cgroup     ext4, inside a memory cgroup of half the files' page cache footprint plus
                  the script's own peak (measured over a 5-files-per-class subset)
  dsfs-cgroup     dsfs, inside the same cgroup

images/s of epoch 1 and epoch 2 (each run in a fresh process, workers started per epoch as
in training), the CPU time per image (the reader and its workers: less sensitive than images/s
to what else the machine runs), the load average after each run, and the ratios the issue sets
targets for (images/s; the cgroup runs read --cgroup-epochs epochs, 1 by default: ext4 at half
its footprint reads from the disk at a few hundred images/s). Then Store.read of a hot 1 KB file
from one thread (us per call: the same file, and 1,000 files in turn). Writes
bench/results/python/python-DATE.jsonl and .md.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from bench_util import PY, REPO, drop_caches, results_dir, sh  # noqa: E402

# The module read: the build's, or DSFS_PYTHONPATH (a copy, kept as it is during a long run).
PYTHONPATH = os.environ.get("DSFS_PYTHONPATH") or os.path.join(REPO, "build", "python")

READER = r"""
import json, resource, sys, time
import torch
from torch.utils.data import DataLoader
from torchvision.transforms import ToTensor
kind, root, epochs, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
t0 = time.perf_counter()
if kind == "torchvision":
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(root, transform=ToTensor())
else:
    import dsfs.torch
    cls = {"dsfs": dsfs.torch.ImageFolder, "dsfs-pixels": dsfs.torch.PixelImageFolder}[kind]
    ds = cls(root, transform=ToTensor())
scan = time.perf_counter() - t0
loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=workers)
out = {"scan_s": round(scan, 3), "images": len(ds), "epochs": [], "cpu_us": []}

def cpu_s():  # this process and its reaped children (the epoch's workers, joined at its end)
    return sum(ru.ru_utime + ru.ru_stime for ru in (resource.getrusage(resource.RUSAGE_SELF),
                                                     resource.getrusage(resource.RUSAGE_CHILDREN)))

for epoch in range(epochs):
    n, t0, c0 = 0, time.perf_counter(), cpu_s()
    for x, y in loader:
        n += x.shape[0]
    out["epochs"].append(round(n / (time.perf_counter() - t0), 1))
    out["cpu_us"].append(round((cpu_s() - c0) / n * 1e6, 1))
print(json.dumps(out))
"""

MICRO = r"""
import json, sys, time
import dsfs
store = dsfs.Store(sys.argv[1])
files = []
for root, _, names in store.walk(""):
    for n in sorted(names):
        files.append(root + "/" + n)
        if len(files) >= 1000:
            break
    if len(files) >= 1000:
        break
# The hot file: the first of about 1 KB.
one = next((f for f in files if 900 <= store.stat(f).st_size <= 1200), files[0])
sizes = [len(store.read(f)) for f in files]
def per_call(paths, rounds):
    best = None
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(rounds):
            for p in paths:
                store.read(p)
        us = (time.perf_counter() - t0) / (rounds * len(paths)) * 1e6
        best = us if best is None else min(best, us)
    return round(best, 2)
print(json.dumps({"file_bytes": len(store.read(one)), "mean_bytes": sum(sizes) // len(sizes),
                  "same_file_us": per_call([one], 50000), "files_1000_us": per_call(files, 50)}))
"""


def run_reader(kind, root, a, cgroup=None):
    argv = [PY, "-c", READER, kind, root, str(a.cgroup_epochs if cgroup else a.epochs),
            str(a.workers)]
    if cgroup:
        argv = ["sh", "-c", f"echo $$ > '{cgroup}/cgroup.procs' && exec \"$0\" \"$@\"", *argv]
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=3600)
    load = round(os.getloadavg()[0], 2)  # of the last minute: the run's own share included
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1],
                "load": load}
    return dict(json.loads(r.stdout.strip().splitlines()[-1]), load=load)


def warm_tree(tree):
    sh(["sh", "-c", f"find '{tree}' -type f -print0 | xargs -0 cat > /dev/null"])


def footprint_bytes(tree):
    total = 0
    for root, _, files in os.walk(tree):
        for f in files:
            total += max(4096, (os.path.getsize(os.path.join(root, f)) + 4095) // 4096 * 4096)
    return total


class Cgroup:
    """A memory cgroup (v1 or v2) named dsfs-python-bench-PID, removed at exit."""

    def __init__(self, limit):
        self.limit = limit
        self.root = self.kind = None
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rest = left.split(), right.split()
                if fields[3] == "/" and rest[0] == "cgroup" and "memory" in rest[2].split(","):
                    self.kind, self.root = "v1", fields[4]
                elif fields[3] == "/" and rest[0] == "cgroup2" and not self.root:
                    self.kind, self.root = "v2", fields[4]
        if not self.root:
            raise RuntimeError("no memory cgroup controller mounted")
        self.path = os.path.join(self.root, f"dsfs-python-bench-{os.getpid()}")

    def __enter__(self):
        os.mkdir(self.path)
        if self.limit is not None:  # None: no limit (a measure of what a reader takes)
            self._write("memory.limit_in_bytes" if self.kind == "v1" else "memory.max", self.limit)
        return self

    def __str__(self):
        return self.path

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def _read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def max_usage(self):
        return int(self._read("memory.max_usage_in_bytes" if self.kind == "v1" else "memory.peak"))

    def reset_peak(self):
        if self.kind == "v1":
            self._write("memory.max_usage_in_bytes", 0)

    def oom_kills(self):
        """OOM kills so far (v1: memory.oom_control's oom_kill; v2: memory.events')."""
        text = self._read("memory.oom_control" if self.kind == "v1" else "memory.events")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def __exit__(self, *exc):
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                with open(os.path.join(self.path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        with open(os.path.join(self.root, "cgroup.procs"), "w") as g:
                            g.write(pid)
                time.sleep(0.1)


def bench_tree(name, tree, a, report):
    db = os.path.join(a.work, f"{name}.db")
    if not os.path.exists(db):
        r = sh([a.dsfs, "pack", "-q", tree, db])
        if r.returncode != 0:
            raise RuntimeError(f"pack {tree}: {r.stderr.strip()}")
    rows = {}

    def record(label, res):
        res.update(tree=name, run=label)
        rows[label] = res
        report(res)

    warm_tree(tree)
    sh(["sh", "-c", f"cat '{db}' > /dev/null"])
    record("ext4", run_reader("torchvision", tree, a))
    record("dsfs", run_reader("dsfs", db, a))
    record("dsfs-pixels", run_reader("dsfs-pixels", db, a))
    predecoded = os.path.join(a.work, f"{name}-predecode.db")
    if not os.path.exists(predecoded):
        r = sh([a.dsfs, "pack", "-q", "--predecode", tree, predecoded])
        if r.returncode != 0:
            raise RuntimeError(f"pack --predecode {tree}: {r.stderr.strip()}")
    sh(["sh", "-c", f"cat '{predecoded}' > /dev/null"])
    record("dsfs-pixels-predecode", run_reader("dsfs-pixels", predecoded, a))
    mnt = os.path.join(a.work, f"{name}-kernel")
    os.makedirs(mnt, exist_ok=True)
    r = sh([a.dsfs, "mount", "-o", "kernel", db, mnt])
    if r.returncode == 0:
        try:
            record("kernel", run_reader("torchvision", mnt, a))
        finally:
            sh([a.dsfs, "umount", mnt])
    else:
        record("kernel", {"error": r.stderr.strip()})
    # The limit: half the files' page cache footprint plus the script's own peak (torch and
    # its workers, measured over a small subset of the tree: as memory_bench.py's ImageFolder
    # rows), the same for ext4 and dsfs.
    half = footprint_bytes(tree) // 2
    subset = subset_tree(tree, os.path.join(a.work, f"{name}-subset"))
    with Cgroup(None) as cg:
        drop_caches()
        run_reader("torchvision", subset, a, cg)
        own = cg.max_usage()
    limit = half + own
    with Cgroup(limit) as cg:
        for label, kind, root in (("ext4-cgroup", "torchvision", tree), ("dsfs-cgroup", "dsfs", db)):
            drop_caches()
            cg.reset_peak()
            res = run_reader(kind, root, a, cg)
            record(label, dict(res, limit_bytes=limit, half_footprint_bytes=half, own_bytes=own,
                               max_usage_bytes=cg.max_usage(), oom_kills=cg.oom_kills()))
    return rows


def subset_tree(tree, dest, per_class=5):
    """A copy of the first `per_class` files of each class of `tree` (made once)."""
    if not os.path.isdir(dest):
        for cls in sorted(os.listdir(tree)):
            src = os.path.join(tree, cls)
            if not os.path.isdir(src):
                continue
            os.makedirs(os.path.join(dest, cls), exist_ok=True)
            for f in sorted(os.listdir(src))[:per_class]:
                with open(os.path.join(src, f), "rb") as i, open(os.path.join(dest, cls, f), "wb") as o:
                    o.write(i.read())
    return dest


def ratio(rows, a_label, b_label, epoch):
    a, b = rows.get(a_label, {}), rows.get(b_label, {})
    if len(a.get("epochs", ())) <= epoch or len(b.get("epochs", ())) <= epoch:
        return None
    return round(a["epochs"][epoch] / b["epochs"][epoch], 2)


TARGETS = [  # (what, ours, theirs, at least)
    ("dsfs.torch.ImageFolder vs ext4 hot", "dsfs", "ext4", 1.2),
    ("dsfs.torch.ImageFolder vs -o kernel", "dsfs", "kernel", 1.0),
    ("PixelImageFolder vs ext4 JPEG hot", "dsfs-pixels", "ext4", 1.5),
    ("PixelImageFolder (pack --predecode) vs ext4 JPEG hot", "dsfs-pixels-predecode", "ext4", 1.5),
    ("in a cgroup at half the footprint, dsfs vs ext4", "dsfs-cgroup", "ext4-cgroup", 1.5),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--photo", required=True, help="a photo-crops tree (datasets.py)")
    ap.add_argument("--fmnist", help="a fashion-mnist tree (datasets.py)")
    ap.add_argument("--work", default="/var/tmp/dsfs-python-bench")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cgroup-epochs", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = results_dir("python")
    jsonl = os.path.join(out_dir, f"python-{stamp}.jsonl")
    commit = sh(["git", "-C", REPO, "rev-parse", "--short", "HEAD"]).stdout.strip()

    def report(row):
        print(json.dumps(row), flush=True)
        with open(jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")

    report({"event": "start", "commit": commit, "cpus": os.cpu_count(), "workers": a.workers,
            "epochs": a.epochs, "uptime_load": os.getloadavg()})
    trees = [("photo", a.photo)] + ([("fmnist", a.fmnist)] if a.fmnist else [])
    results = {name: bench_tree(name, tree, a, report) for name, tree in trees}
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    micro = json.loads(subprocess.run([PY, "-c", MICRO, os.path.join(a.work, "photo.db")],
                                      capture_output=True, text=True, env=env,
                                      check=True).stdout)
    report(dict(micro, run="Store.read"))

    lines = [f"# dsfs Python module benchmark {stamp} (commit {commit})", "",
             f"{a.workers} DataLoader workers, batch 256, ToTensor(); images/s, epoch 1 / epoch 2 "
             f"(epoch 2 hot); {os.cpu_count()} CPUs, load average at start "
             f"{os.getloadavg()[0]:.1f}. Raw rows: {os.path.basename(jsonl)}.", ""]
    for name, rows in results.items():
        n = next((r["images"] for r in rows.values() if "images" in r), "?")
        lines += [f"## {name} ({n} images)", "",
                  "| run | images/s epoch 1 | epoch 2 | CPU us/image epoch 1 | epoch 2 | load after |",
                  "|---|---|---|---|---|---|"]
        for label, r in rows.items():
            ep = list(r.get("epochs", [r.get("error", "?")])) + [""] * 2
            cpu = list(r.get("cpu_us", [])) + [""] * 2
            extra = (f" (limit {r['limit_bytes'] / 1e6:.0f} MB = {r['half_footprint_bytes'] / 1e6:.0f}"
                     f" + own {r['own_bytes'] / 1e6:.0f}; peak {r['max_usage_bytes'] / 1e6:.0f} MB,"
                     f" {r['oom_kills']} OOM kills)") if "limit_bytes" in r else ""
            cells = [f"{c:,.0f}" if isinstance(c, float) else str(c) for c in ep[:2] + cpu[:2]]
            lines.append(f"| {label}{extra} | " + " | ".join(cells) + f" | {r.get('load', '')} |")
        lines += ["", "| target | epoch 1 | epoch 2 | at least |", "|---|---|---|---|"]
        for what, ours, theirs, least in TARGETS:
            r0, r1 = ratio(rows, ours, theirs, 0), ratio(rows, ours, theirs, 1)
            lines.append(f"| {what} | {'n/a' if r0 is None else f'{r0}x'} | "
                         f"{'n/a' if r1 is None else f'{r1}x'} | {least}x |")
        lines.append("")
    lines += ["## Store.read, one thread", "",
              f"hot {micro['file_bytes']} B file: {micro['same_file_us']} us per call; 1,000 files "
              f"(mean {micro['mean_bytes']} B) in turn: {micro['files_1000_us']} us per call "
              "(target <= 5 us)", ""]
    md = os.path.join(out_dir, f"python-{stamp}.md")
    with open(md, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
