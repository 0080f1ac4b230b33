#!/usr/bin/python3
"""What one FUSE round trip costs between bursts of work: isatty() on dsfs files vs ext4.

  /usr/bin/python3 bench/fuse_wakeup.py [--dsfs BUILD/dsfs] [--work /var/tmp/dsfs-bench]
                                        [--dataset photo32] [--files 3000]

Python's open() calls isatty() (an ioctl every FUSE file system must answer) once per file, so
an ImageFolder worker pays one round trip to the daemon between ~150 us of decoding. For N files
of the core benchmark's tree (mounted from WORK/DATASET.dsfs): the mean time of os.isatty() on
an open file, with 0 and 150 us of busy Python work before each call, with the daemon's threads
free to run on any CPU, pinned to the caller's CPU, and pinned to the other one (the caller on
CPU 0), and on ext4. Writes bench/results/roundtrip/fuse-wakeup-<date>.md.
"""
import argparse
import glob
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from bench_util import REPO, Mount, results_dir, sh  # noqa: E402


def probe(root, files, busy_us):
    """Runs in a child pinned to CPU 0: mean isatty() microseconds."""
    paths = sorted(glob.glob(os.path.join(root, "*", "*")))[:files]
    total = 0.0
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        end = time.perf_counter() + busy_us / 1e6
        while time.perf_counter() < end:
            pass
        t0 = time.perf_counter()
        os.isatty(fd)
        total += time.perf_counter() - t0
        os.close(fd)
    return total / len(paths) * 1e6


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        print(round(probe(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])), 1))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsfs", default=os.path.join(REPO, "build", "dsfs"))
    ap.add_argument("--work", default=os.environ.get("BENCH_WORK", "/var/tmp/dsfs-bench"))
    ap.add_argument("--dataset", default="photo32")
    ap.add_argument("--files", type=int, default=3000)
    a = ap.parse_args()
    dsfs = os.path.abspath(a.dsfs)
    store = os.path.join(a.work, a.dataset + ".dsfs")
    mnt = os.path.join(a.work, "mnt", "fuse-wakeup")

    def run(root, busy):
        r = sh(["taskset", "-c", "0", sys.executable, os.path.abspath(__file__), "--probe", root,
                str(a.files), str(busy)])
        return float(r.stdout.strip())

    rows = []
    with Mount(dsfs, store, mnt):
        pid = sh(["pgrep", "-f", f"dsfs mount {store} {mnt}"]).stdout.split()[0]

        def pin(cpus):
            for t in os.listdir(f"/proc/{pid}/task"):
                subprocess.run(["taskset", "-p", "-c", cpus, t], stdout=subprocess.DEVNULL)

        for busy in (0, 150):
            for label, cpus in (("daemon on any CPU", "0-%d" % (os.cpu_count() - 1)),
                                ("daemon on the caller's CPU", "0"),
                                ("daemon on the other CPU", "1")):
                pin(cpus)
                rows.append((f"dsfs, {label}", busy, run(mnt, busy)))
        pin("0-%d" % (os.cpu_count() - 1))
    for busy in (0, 150):
        rows.append(("ext4 (the source tree)", busy, run(os.path.join(a.work, a.dataset), busy)))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    lines = [f"# One FUSE round trip between bursts of work, {stamp}", "",
             f"- machine: {os.cpu_count()} CPUs, kernel {platform.release()}; dsfs {dsfs}; "
             f"{a.files} files of {a.dataset}; the caller pinned to CPU 0", "",
             "| where | busy us before each call | isatty() mean us |", "|---|---|---|"]
    lines += [f"| {w} | {b} | {us} |" for w, b, us in rows]
    lines += ["", "Command: `bench/fuse_wakeup.py`.", ""]
    with open(os.path.join(results_dir("roundtrip"), f"fuse-wakeup-{stamp}.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
