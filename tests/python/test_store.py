"""dsfs.Store: the files, listings, errors and the file objects."""
import io
import os
import pickle
import re
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest
from PIL import Image

import dsfs
from conftest import REPO, hidden_tree, pack, write_image


@pytest.fixture(scope="module")
def tree_store(session_dir):
    tree = hidden_tree(session_dir / "store-tree")
    with open(os.path.join(tree, "big.bin"), "wb") as f:
        f.write(np.random.default_rng(3).integers(0, 256, 9 << 20, dtype=np.uint8).tobytes())
    return tree, dsfs.Store(pack(tree, session_dir / "store-tree.db"))


def all_files(tree):
    for root, dirs, files in os.walk(tree):
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path):
                yield os.path.relpath(path, tree)


def test_every_file_reads_as_the_original(tree_store):
    tree, store = tree_store
    files = list(all_files(tree))
    assert len(files) > 15
    for rel in files:
        with open(os.path.join(tree, rel), "rb") as f:
            want = f.read()
        assert store.read(rel) == want, rel
        assert store.read("/" + rel) == want
        with store.open(rel) as f:
            assert f.read() == want
        assert store.stat(rel).st_size == len(want)


def test_listings_and_stat_as_os(tree_store):
    tree, store = tree_store
    for root, dirs, files in os.walk(tree):
        rel = os.path.relpath(root, tree)
        rel = "" if rel == "." else rel
        assert sorted(store.listdir(rel)) == sorted(os.listdir(root)), rel
        for name in dirs + files:
            p = os.path.join(rel, name)
            assert stat.S_IFMT(store.lstat(p).st_mode) == stat.S_IFMT(os.lstat(os.path.join(root, name)).st_mode)
            assert store.exists(p) == os.path.exists(os.path.join(root, name)), p
            assert store.isdir(p) == os.path.isdir(os.path.join(root, name)), p
    assert store.readlink("kitty") == os.readlink(os.path.join(tree, "kitty"))
    assert store.listdir("kitty") == store.listdir("cat")
    theirs = sorted(os.walk(tree, followlinks=True))
    ours = sorted(store.walk("", followlinks=True))
    assert [(os.path.relpath(os.path.join(tree, d), tree), sorted(ds), sorted(fs)) for d, ds, fs in ours] == \
           [(os.path.relpath(d, tree), sorted(ds), sorted(fs)) for d, ds, fs in theirs]


def test_walk_ends_on_a_link_loop(session_dir):
    tree = session_dir / "loop"
    write_image(f"{tree}/a/x.jpg", 1)
    os.symlink("..", f"{tree}/a/up")
    store = dsfs.Store(pack(tree, session_dir / "loop.db"))
    walked = list(store.walk("", followlinks=True))
    assert [d for d, _, _ in walked] == ["", "a"]
    assert store.read("a/up/a/up/a/x.jpg") == store.read("a/x.jpg")


def test_errors_are_python_exceptions(tree_store, session_dir):
    tree, store = tree_store
    with pytest.raises(FileNotFoundError):
        store.read("no/such/file")
    with pytest.raises(FileNotFoundError):
        store.stat("Zebra (1)/dangling.txt")
    with pytest.raises(IsADirectoryError):
        store.read("cat")
    with pytest.raises(IsADirectoryError):
        store.open("kitty")
    with pytest.raises(NotADirectoryError):
        store.listdir("dog/notes.txt")
    with pytest.raises(NotADirectoryError):
        store.read("dog/notes.txt/x")
    with pytest.raises(FileNotFoundError):
        dsfs.Store(str(session_dir / "missing.db"))
    with pytest.raises(OSError, match="not a dsfs store"):
        dsfs.Store(tree)
    with pytest.raises(ValueError, match="unknown option"):
        dsfs.Store(store.path, no_such_option=1)
    with pytest.raises(ValueError, match="mount's"):
        dsfs.Store(store.path, threads=4)
    with pytest.raises(ValueError, match="cache_size"):
        dsfs.Store(store.path, cache_size="lots")
    with pytest.raises(ValueError, match="view"):
        dsfs.Store(store.path, view="gif")
    with pytest.raises(ValueError, match="only 'rb'"):
        store.open("dog/notes.txt", "w")
    with pytest.raises(TypeError):
        store.read(42)


def test_options(tree_store):
    _, store = tree_store
    small = dsfs.Store(store.path, cache_size="16M", umask="022", view="bmp")
    assert small.info()["cache_bytes"] == 16 << 20
    assert small.info()["view"] == "bmp"
    assert small.read("cat/a.jpg")[:2] == b"BM"       # the bmp view at the root
    assert small.read(".dsfs/original/cat/a.jpg") == store.read("cat/a.jpg")
    assert small.stat("dog/notes.txt").st_mode & 0o022 == 0
    assert dsfs.Store(store.path, cache_size=0).read("dog/notes.txt") == b"not an image\n"


def test_file_object(tree_store):
    tree, store = tree_store
    want = open(os.path.join(tree, "big.bin"), "rb").read()
    with store.open("big.bin") as f:            # larger than what is read whole
        assert isinstance(f, io.RawIOBase) and f.readable() and f.seekable()
        assert f.read(10) == want[:10] and f.tell() == 10
        f.seek(-5, io.SEEK_END)
        assert f.read() == want[-5:]
        f.seek(1 << 20)
        buf = bytearray(300000)
        assert f.readinto(buf) == len(buf) and bytes(buf) == want[1 << 20:(1 << 20) + 300000]
        f.seek(len(want) + 10)
        assert f.read(5) == b""
        with pytest.raises(OSError):
            f.seek(-1)
    assert f.closed
    with pytest.raises(ValueError):
        f.read()
    raw = store.open("cat/a.jpg", buffering=0)
    assert isinstance(raw, dsfs.File) and raw.read() == store.read("cat/a.jpg")
    img = Image.open(store.open("dog/1.png"))
    assert img.size == (5, 40)
    arr = np.load(store.open(".dsfs/npy/dog/1.png.npy"))
    assert arr.shape == (40, 5, 3)
    assert (arr == np.asarray(Image.open(os.path.join(tree, "dog/1.png")).convert("RGB"))).all()


def test_threads_share_a_store(tree_store):
    tree, store = tree_store
    files = [f for f in all_files(tree) if f != "big.bin"]
    want = {f: open(os.path.join(tree, f), "rb").read() for f in files}
    errors = []

    def reader(k):
        try:
            for i in range(200):
                f = files[(i * 7 + k) % len(files)]
                if store.read(f) != want[f]:
                    errors.append(f)
                if i % 10 == 0:  # file objects too: seek, readinto
                    with store.open(f, buffering=0) as fo:
                        fo.seek(len(want[f]) // 2)
                        buf = bytearray(len(want[f]))
                        n = fo.readinto(buf)
                        if bytes(buf[:n]) != want[f][len(want[f]) // 2:]:
                            errors.append(f + " (readinto)")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_fork_and_pickle(tree_store):
    tree, store = tree_store
    want = store.read("cat/a.jpg")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ok = store.read("cat/a.jpg") == want and store.pixels("cat/a.jpg").shape == (9, 12, 3)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert store.read("cat/a.jpg") == want  # the parent's store still serves
    again = pickle.loads(pickle.dumps(store))
    assert again.path == store.path and again.read("cat/a.jpg") == want
    opts = pickle.loads(pickle.dumps(dsfs.Store(store.path, cache_size="8M")))
    assert opts.info()["cache_bytes"] == 8 << 20


def test_help_documents_every_method():
    for name in dir(dsfs.Store):
        if name.startswith("_"):
            continue
        doc = getattr(dsfs.Store, name).__doc__
        assert doc and len(doc) > 30, name
    assert "path_or_url" in dsfs.Store.__doc__
    text = subprocess.run([sys.executable, "-c", "import dsfs; help(dsfs.Store)"],
                          capture_output=True, text=True, env={**os.environ, "PAGER": "cat"})
    for method in ("listdir", "stat", "walk", "open", "read", "pixels", "tensor"):
        assert method + "(" in text.stdout


def test_no_libfuse_in_the_module():
    so = dsfs._dsfs.__file__
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True, check=True).stdout
    assert "NEEDED" in needed and "fuse" not in needed.lower()
    syms = subprocess.run(["nm", "-D", "--undefined-only", so], capture_output=True, text=True,
                          check=True).stdout
    assert "fuse_" not in syms
    ldd = subprocess.run(["ldd", so], capture_output=True, text=True, check=True).stdout
    assert "libfuse" not in ldd
    # Nor, in its sources, a header of the layers above fs/ (docs/design.md).
    src_dir = os.path.join(REPO, "python")
    for name in os.listdir(src_dir):
        if name.endswith((".cc", ".h")):
            with open(os.path.join(src_dir, name)) as f:
                for line in f:
                    assert not re.match(r'#include [<"](fuse|kernel|mount|pack|tools|erofs)/', line), line
                    assert not re.match(r"#include <fuse", line), line


def test_rocksdb_store(session_dir, small_store):
    tree, _ = small_store
    db = pack(tree, session_dir / "small-rocksdb", "--backend", "rocksdb")
    store = dsfs.Store(db)
    assert store.info()["backend"] == "rocksdb"
    want = {f"{c}/{n}": open(os.path.join(tree, c, n), "rb").read()
            for c in os.listdir(tree) for n in os.listdir(os.path.join(tree, c))}
    assert {f: store.read(f) for f in want} == want
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reopens the directory the parent holds open
        try:
            os.write(w, b"1" if all(store.read(f) == d for f, d in want.items()) else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    assert pickle.loads(pickle.dumps(store)).read("c0/img00.jpg") == want["c0/img00.jpg"]


FORK_UNDER_LOAD = r"""
import os, sys, threading, dsfs
store = dsfs.Store(sys.argv[1], cache_size="4M")
want = store.read("cat/a.jpg")
stop = False
def busy():  # holds the Store's lock for most of its time (the cache and its guard restarted)
    n = 1
    while not stop:
        store.share_cache(n)
        n = 3 - n
t = threading.Thread(target=busy)
t.start()
bad = 0
for _ in range(20):
    pid = os.fork()
    if pid == 0:
        os._exit(0 if store.read("cat/a.jpg") == want else 1)
    _, status = os.waitpid(pid, 0)
    bad += status != 0
stop = True
t.join()
print(bad)
"""


def test_fork_while_another_thread_uses_the_store(tree_store):
    # A fork copies a lock another thread holds at that moment: the child would wait for it
    # for ever. The Store's locks are taken across the fork (pthread_atfork).
    _, store = tree_store
    p = subprocess.Popen([sys.executable, "-c", FORK_UNDER_LOAD, store.path], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)  # its children too: a child stuck on the lock
        p.communicate()
        pytest.fail("a child of the fork never finished its read")
    assert p.returncode == 0 and out.split() == ["0"], err[-500:]


def test_careless_and_hostile_input(tree_store, session_dir):
    tree, store = tree_store
    with pytest.raises(ValueError, match="embedded null byte"):
        store.read("cat/a\0.jpg")
    with pytest.raises(ValueError, match="embedded null byte"):
        dsfs.Store(store.path + "\0x")
    with pytest.raises(ValueError, match="URL scheme 'http' is not supported"):
        dsfs.Store("http://example.com/x.db")
    truncated = session_dir / "truncated.db"
    truncated.write_bytes(open(store.path, "rb").read()[:20000])
    with pytest.raises(OSError, match="truncated"):
        dsfs.Store(str(truncated))
    with pytest.raises(ValueError, match="unknown view 'gif'"):
        store.open("cat/a.jpg", view="gif")
    with pytest.raises(ValueError, match="unknown view"):
        store.read_view("cat/a.jpg", "../..")
    with pytest.raises(TypeError, match="view"):
        store.open("cat/a.jpg", view=3)
    with pytest.raises(ValueError, match="from 16 to 4096"):
        store.pixels("cat/a.jpg", size=0)
    with pytest.raises(NotADirectoryError):
        store.tensor("dog/notes.txt")
    with pytest.raises(FileNotFoundError, match="'nope'"):
        store.tensor("nope")
    with pytest.raises(ValueError, match="1 to 65536"):
        store.share_cache(0)
    with pytest.raises(ValueError, match="1 to 65536"):
        store.share_cache(1 << 40)
    f = store.open("big.bin", buffering=0)
    size = f.size()
    with pytest.raises(TypeError):
        f.seek(1.5)
    with pytest.raises(TypeError):
        f.read("10")
    assert len(f.read(1 << 64)) == size  # any size asked: what is left
    f.seek(1 << 70)
    assert f.read(10) == b"" and f.readinto(bytearray(4)) == 0
    f.seek(0)
    with pytest.raises(TypeError):
        f.readinto(b"read-only")
    strided = np.zeros(64, np.uint8)[::-2]  # never written past: refused as FileIO does
    with pytest.raises((ValueError, BufferError)):
        f.readinto(strided)
    assert f.readinto(np.zeros(4, np.float64)) == 32  # any contiguous buffer, in bytes
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.readinto(bytearray(4))
    bare = dsfs._dsfs._Store.__new__(dsfs._dsfs._Store)  # __init__ never ran: no crash
    for call in (lambda: bare.read("x"), lambda: bare.info(), lambda: bare.listdir(),
                 lambda: bare.path):
        with pytest.raises(TypeError, match="not opened"):
            call()
    with pytest.raises(TypeError, match="not a dsfs.Store"):
        dsfs._dsfs._Store.read(42, "x")
