"""Every view read through dsfs.Store against the same files of a real mount of the store."""
import os
import subprocess

import numpy as np
import pytest

import dsfs
from conftest import DSFS, hidden_tree, pack

VIEWS = ["bmp", "npy", "bmp-24", "jpeg-24"]


@pytest.fixture(scope="module")
def mounted(session_dir, small_store):
    if not DSFS:
        pytest.skip("DSFS_BIN is not set (run through ctest)")
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        pytest.skip("no /dev/fuse here: no mount to compare with")
    tree = hidden_tree(session_dir / "views", empty_classes=False)
    for c in range(2):  # a directory of one size, for the tensor view
        for i in range(3):
            src = os.path.join(small_store[0], f"c{c}", f"img{i:02d}.jpg")
            os.makedirs(os.path.join(tree, "same", f"c{c}"), exist_ok=True)
            with open(src, "rb") as f, open(os.path.join(tree, "same", f"c{c}", f"{i}.jpg"), "wb") as g:
                g.write(f.read())
    db = pack(tree, session_dir / "views.db")
    mnt = session_dir / "views-mnt"
    mnt.mkdir()
    r = subprocess.run([DSFS, "mount", db, str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"dsfs mount failed: {r.stderr.strip()}")
    try:
        yield tree, dsfs.Store(db), str(mnt)
    finally:
        subprocess.run([DSFS, "umount", str(mnt)], capture_output=True)


def view_files(mnt, view):
    top = os.path.join(mnt, ".dsfs", view)
    for root, _, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            if os.path.isfile(path):
                yield os.path.relpath(path, top)


@pytest.mark.parametrize("view", VIEWS)
def test_view_files_match_the_mount(mounted, view):
    _, store, mnt = mounted
    files = list(view_files(mnt, view))
    assert len(files) > 15
    for rel in files:
        with open(os.path.join(mnt, ".dsfs", view, rel), "rb") as f:
            want = f.read()
        assert store.read_view(rel, view) == want, (view, rel)
        assert store.stat(store.view_path(rel, view)).st_size == len(want)
        with store.open(rel, view=view) as f:
            assert f.read() == want


def test_pixels_and_resized_match_the_mount(mounted):
    from PIL import Image
    _, store, mnt = mounted
    checked = 0
    for rel in view_files(mnt, "npy"):
        if not rel.endswith(".npy"):
            continue
        image = rel[:-4]
        want = np.load(os.path.join(mnt, ".dsfs", "npy", rel))
        got = store.pixels(image)
        assert got.dtype == np.uint8 and (got == want).all(), image
        small = np.asarray(Image.open(os.path.join(mnt, ".dsfs", "bmp-24", image)).convert("RGB"))
        assert (store.pixels(image, size=24) == small).all(), image
        checked += 1
    assert checked > 10
    with pytest.raises(ValueError, match="not an image"):
        store.pixels("dog/notes.txt")
    with pytest.raises(FileNotFoundError):
        store.pixels("dog/none.jpg")


def test_tensor_view_matches_the_mount(mounted):
    _, store, mnt = mounted
    images, labels, classes, files = store.tensor("same")
    top = os.path.join(mnt, ".dsfs", "tensor", "same")
    assert (images == np.load(os.path.join(top, "images.npy"))).all()
    assert (labels == np.load(os.path.join(top, "labels.npy"))).all()
    assert classes == open(os.path.join(top, "classes.txt")).read().splitlines() == ["c0", "c1"]
    assert files == open(os.path.join(top, "files.txt")).read().splitlines()
    assert images.shape == (6, 16, 16, 3)
