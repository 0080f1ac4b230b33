"""dsfs.Store inside a memory cgroup: its RAM cache budget comes from the cgroup's limit (as a
mount's), and reading a store larger than the limit stays inside it (no OOM kill)."""
import hashlib
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import pack

LIMIT = 48 << 20


def memory_cgroup_root():
    """('v1' or 'v2', the mount of the memory controller), or None."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, (fstype, _, opts) = left.split(), right.split()[:3]
            if fields[3] != "/":
                continue
            if fstype == "cgroup" and "memory" in opts.split(","):
                return "v1", fields[4]
            if fstype == "cgroup2" and os.path.exists(os.path.join(fields[4], "cgroup.subtree_control")):
                with open(os.path.join(fields[4], "cgroup.subtree_control")) as c:
                    if "memory" in c.read().split():
                        return "v2", fields[4]
    return None


@pytest.fixture
def cgroup():
    found = memory_cgroup_root()
    if found is None or os.geteuid() != 0:
        pytest.skip("no memory cgroup this test may make (root, cgroup v1 or v2 memory)")
    kind, root = found
    path = os.path.join(root, f"dsfs-python-test-{os.getpid()}")
    os.mkdir(path)
    limit_file = "memory.limit_in_bytes" if kind == "v1" else "memory.max"
    with open(os.path.join(path, limit_file), "w") as f:
        f.write(str(LIMIT))
    try:
        yield kind, path
    finally:
        for _ in range(100):
            try:
                os.rmdir(path)
                break
            except OSError:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        with open(os.path.join(root, "cgroup.procs"), "w") as g:
                            g.write(pid)
                time.sleep(0.1)


READER = r"""
import hashlib, sys, dsfs
store = dsfs.Store(sys.argv[1])
h = hashlib.sha256()
for name in sorted(store.listdir()):
    h.update(store.read(name))
for name in sorted(store.listdir()):  # twice: the cache evicts within its budget
    with store.open(name) as f:
        h.update(f.read())
print(store.info()["cache_bytes"], h.hexdigest())
"""


def test_reads_inside_a_memory_cgroup(session_dir, cgroup):
    kind, path = cgroup
    tree = session_dir / "cgroup-tree"
    tree.mkdir()
    want = hashlib.sha256()
    rng = __import__("random").Random(7)
    files = {f"f{i:03d}.bin": rng.randbytes(1 << 20) for i in range(64)}  # 64 MiB > the limit
    for name, data in files.items():
        (tree / name).write_bytes(data)
    for name in sorted(files):
        want.update(files[name])
    for name in sorted(files):
        want.update(files[name])
    db = pack(tree, session_dir / "cgroup.db")
    r = subprocess.run(["sh", "-c", f"echo $$ > '{path}/cgroup.procs' && exec \"$0\" \"$@\"",
                        sys.executable, "-c", READER, db], capture_output=True, text=True,
                       env=os.environ, timeout=120)
    assert r.returncode == 0, r.stderr
    cache_bytes, digest = r.stdout.split()
    assert digest == want.hexdigest()
    # The default budget is a share of the cgroup's limit, never of the host's memory.
    assert 0 < int(cache_bytes) <= LIMIT * 3 // 8
    events = os.path.join(path, "memory.events" if kind == "v2" else "memory.oom_control")
    with open(events) as f:
        text = f.read()
    assert "oom_kill 0" in text or "oom_kill" not in text, text


BALLAST = r"""
import sys, time, dsfs
store = dsfs.Store(sys.argv[1])
ballast = bytearray(int(sys.argv[2]))  # the reader's own memory (a model, batches): not the cache's
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
time.sleep(0.5)  # the guard's next samples see it (as a model loaded before the first epoch)
names = sorted(store.listdir())
for _ in range(3):
    for name in names:
        store.read(name)
time.sleep(0.3)  # a few of the guard's samples
print(store.info()["cache_bytes"], store.info()["memory_guard"])
"""


def test_the_guard_sheds_the_cache_when_the_reader_grows(session_dir, cgroup):
    # As a mount's daemon (fs/memory_guard.h): when the process's own memory leaves no room
    # for the RAM cache's budget, the cache is shed instead of the process being OOM-killed.
    kind, path = cgroup
    tree = session_dir / "guard-tree"
    tree.mkdir()
    rng = np.random.default_rng(8)
    for i in range(48):
        # compressible: read through the RAM cache (decompressed chunks), not mapped as stored
        (tree / f"g{i:03d}.txt").write_bytes(rng.integers(97, 105, 1 << 20, np.uint8).tobytes())
    db = pack(tree, session_dir / "guard.db")
    r = subprocess.run(["sh", "-c", f"echo $$ > '{path}/cgroup.procs' && exec \"$0\" \"$@\"",
                        sys.executable, "-c", BALLAST, db, str(28 << 20)], capture_output=True,
                       text=True, env=os.environ, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    cache_bytes, watching = r.stdout.split(None, 1)
    assert "cgroup" in watching
    assert int(cache_bytes) < LIMIT * 3 // 8  # lowered from the default budget
