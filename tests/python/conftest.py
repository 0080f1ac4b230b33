"""Shared fixtures of the Python module's tests (tests/python, ctest label `python`).

Run by ctest (tests/CMakeLists.txt) as /usr/bin/python3 -m pytest with PYTHONPATH at the
build's python/ folder and DSFS_BIN naming the build's dsfs binary (packs the stores)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

DSFS = os.environ.get("DSFS_BIN", "")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dsfs_cli(*args, check=True, **kw):
    if not DSFS:
        pytest.skip("DSFS_BIN is not set (run through ctest)")
    return subprocess.run([DSFS, *args], check=check, capture_output=True, text=True, **kw)


def pack(tree, db, *extra):
    dsfs_cli("pack", "-q", *extra, str(tree), str(db))
    return str(db)


def write_image(path, seed, size=(12, 9), mode="RGB", fmt=None):
    rng = np.random.default_rng(seed)
    w, h = size
    shape = (h, w) if mode == "L" else (h, w, 3)
    img = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    img.save(path, format=fmt)


def hidden_tree(root, empty_classes=True):
    """An ImageFolder tree with what real ones hold: odd names, mixed case extensions, nested
    directories, an empty class, a class of only non-images, links to a class directory, to
    an image and to nothing (empty_classes=False: without the two empty classes), a name that is not UTF-8, non-image files, grayscale and RGBA
    PNGs, BMP and WebP."""
    r = str(root)
    write_image(f"{r}/cat/a.jpg", 1)
    write_image(f"{r}/cat/B.JPG", 2, fmt="JPEG")
    write_image(f"{r}/cat/with space é.jpeg", 3, fmt="JPEG")
    write_image(f"{r}/cat/sub/deeper/x.png", 4)
    write_image(f"{r}/cat/sub-a/y.png", 5, mode="L")
    write_image(f"{r}/cat/.hidden.jpg", 6)
    write_image(f"{r}/dog/1.png", 7, size=(5, 40))
    write_image(f"{r}/dog/10.png", 8)
    write_image(f"{r}/dog/2.PNG", 9, fmt="PNG")
    Image.fromarray(np.full((6, 6, 4), 200, np.uint8), "RGBA").save(f"{r}/dog/rgba.png")
    with open(f"{r}/dog/notes.txt", "w") as f:
        f.write("not an image\n")
    with open(f"{r}/dog/fake.jpg.bak", "wb") as f:
        f.write(b"\xff\xd8 nope")
    if empty_classes:
        os.makedirs(f"{r}/empty")
        os.makedirs(f"{r}/only_text")
        with open(f"{r}/only_text/readme.md", "w") as f:
            f.write("# none\n")
    write_image(f"{r}/Zebra (1)/z.bmp", 10, fmt="BMP")
    write_image(f"{r}/_under/u.webp", 11, fmt="WEBP")
    os.symlink("cat", f"{r}/kitty")                      # a class that is a link
    os.symlink("../cat/a.jpg", f"{r}/dog/link.jpg")      # a link to an image
    os.symlink("missing.png", f"{r}/Zebra (1)/dangling.txt")  # to nothing (not an image name)
    write_image(os.fsdecode(os.fsencode(r) + b"/cat/caf\xe9-latin1.jpg"), 12)  # not UTF-8
    with open(f"{r}/top-level.jpg", "wb") as f:          # a file beside the classes
        f.write(b"x")
    return r


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dsfs-python")


@pytest.fixture(scope="session")
def small_store(session_dir):
    """(tree, store) of 2 classes x 12 same-size images, for the DataLoader tests."""
    tree = session_dir / "small"
    for c in range(2):
        for i in range(12):
            write_image(f"{tree}/c{c}/img{i:02d}.jpg", 100 * c + i, size=(16, 16))
    return str(tree), pack(tree, session_dir / "small.db")
