"""Helpers shared by the Python benchmarks (bench/*.py): subprocesses, drop_caches, a dsfs mount
as a context manager, the ImageFolder reader, the one reader of files (dsfs-readbench) and the
daemon's memory. Imported, not run: a script finds it with

  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
  from bench_util import Mount, sh  # noqa: E402

The shell scripts' counterpart is bench/lib/lib.sh.
"""
import json
import os
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIB = os.path.join(REPO, "bench", "lib")
PY = "/usr/bin/python3"
# dsfs-readbench (bench/tools/readbench.cc) as the top-level build makes it; every script's
# --readbench default.
READBENCH = os.path.join(REPO, "build", "bench", "dsfs-readbench")


def results_dir(kind):
    """bench/results/KIND/, made if missing: where a benchmark of that kind writes its reports."""
    path = os.path.join(REPO, "bench", "results", kind)
    os.makedirs(path, exist_ok=True)
    return path


def sh(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def drop_caches():
    sh(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def is_mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Mount:
    def __init__(self, dsfs, store, mnt, opts=()):
        self.dsfs, self.store, self.mnt, self.opts = dsfs, store, mnt, list(opts)

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        r = sh([self.dsfs, "mount", self.store, self.mnt, *self.opts])
        if r.returncode != 0:
            raise RuntimeError(f"dsfs mount {self.store}: {r.stderr.strip()}")
        return self

    def stats(self):
        with open(os.path.join(self.mnt, ".dsfs", "stats")) as f:
            return json.loads(f.read())

    def __exit__(self, *exc):
        for _ in range(50):
            if not is_mounted(self.mnt):
                return False
            sh([self.dsfs, "umount", self.mnt])
            time.sleep(0.1)
        sh([self.dsfs, "umount", "--lazy", self.mnt])
        return False


def epochs_of(output):
    """The JSON lines of a reader's output (imagefolder_read.py, dsfs-readbench)."""
    return [json.loads(l) for l in output.splitlines() if l.startswith("{")]


def imagefolder(root, subset, label, extra=(), timeout=1800):
    """Two epochs of bench/lib/imagefolder_read.py (`extra`: more of its options, e.g. --resize)."""
    r = sh([PY, os.path.join(LIB, "imagefolder_read.py"), root, "--epochs", "2",
            "--workers", "2", "--batch", "256", "--subset", str(subset), "--label", label,
            *extra], timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"imagefolder_read {root}: {r.stderr.strip()[-500:]}")
    ev = epochs_of(r.stdout)
    return {"scan_s": ev[0]["scan_s"], "images": ev[0]["images"],
            "epoch_images": ev[1]["images"],
            "epoch1": ev[1]["images_per_s"], "epoch2": ev[2]["images_per_s"]}


def readbench_argv(rb, root, lst, threads, passes, *extra):
    """dsfs-readbench's command line: PASSES shuffled passes over the list file LST (paths
    relative to ROOT) with THREADS threads; `extra`: more of its options (--stat, --limit N)."""
    return [rb, root, "--list", lst, "--threads", str(threads), "--passes", str(passes), *extra]


def readbench(rb, root, lst, threads, passes, *extra, timeout=1800):
    """dsfs-readbench's JSON lines, one per pass ({"files_per_s", "errors", ...}). Raises
    RuntimeError when it exits non-zero or prints no line; a file that failed to read (exit
    status 1) is one of those: callers that accept errors run readbench_argv themselves."""
    r = sh(readbench_argv(rb, root, lst, threads, passes, *extra), timeout=timeout)
    rows = epochs_of(r.stdout)
    if r.returncode != 0 or not rows:
        raise RuntimeError(f"readbench {root}: {r.stderr.strip()[-300:]} {rows}")
    return rows


def daemon_rss_kb(store):
    """VmRSS (kB) of the `dsfs mount STORE ...` daemon, None if none runs."""
    r = sh(["pgrep", "-f", f"dsfs mount {store}"])
    for pid in r.stdout.split():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            pass
    return None


def daemon_memory(mnt):
    """VmRSS, VmHWM, RssAnon and RssFile (kB) of the dsfs daemon serving `mnt`; {} if none."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if b"mount" not in argv or mnt.encode() not in argv:
                continue
            with open(f"/proc/{pid}/status") as f:
                st = dict(line.split(":", 1) for line in f if ":" in line)
            return {k: int(st[k].split()[0]) for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}
        except OSError:
            continue
    return {}
