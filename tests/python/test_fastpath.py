"""ImageFolder's default loader makes the PIL image from pixels the store decodes in C++
(dsfs.torch._pixels_image) where that is exact: the same images as torchvision's pil_loader
over many JPEG and PNG variants, the fast path taken where it should be, PIL (and its errors)
for the rest."""
import io
import os

import numpy as np
import pytest
import torchvision
from PIL import Image

import dsfs
import dsfs.torch as dt
from conftest import pack


def photo_like(w, h, seed, mode="RGB"):
    """Noise over gradients: chroma that subsampling and the IDCT round differently."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(1, w - 1), y * 255 // max(1, h - 1), (x + y) % 256], -1)
    arr = np.clip(base + rng.integers(-60, 60, (h, w, 3)), 0, 255).astype(np.uint8)
    img = Image.fromarray(arr, "RGB")
    return img if mode == "RGB" else img.convert(mode)


SIZES = [(1, 1), (7, 5), (17, 13), (33, 47), (64, 48), (129, 65)]


def jpeg_variants():
    """(name, image, save options, fast): the variants the C++ decoder takes (fast) and not."""
    out = []
    for i, (w, h) in enumerate(SIZES):
        for sub in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
            out.append((f"s{w}x{h}-sub{sub}.jpg", photo_like(w, h, i), dict(subsampling=sub), True))
        out.append((f"p{w}x{h}.jpg", photo_like(w, h, i), dict(progressive=True, quality=90), True))
        out.append((f"g{w}x{h}.jpg", photo_like(w, h, i, "L"), dict(quality=80), True))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 (pil_loader does not apply it; neither do we)
    out.append(("exif-rot.jpg", photo_like(20, 11, 50), dict(exif=exif.tobytes()), True))
    out.append(("optimized-q100.jpg", photo_like(31, 9, 51), dict(optimize=True, quality=100), True))
    out.append(("cmyk.jpg", photo_like(18, 12, 52, "CMYK"), dict(), False))
    return out


def png_variants():
    img = photo_like(23, 17, 60)
    rgba = img.copy()
    rgba.putalpha(Image.fromarray(np.arange(23 * 17, dtype=np.uint8).reshape(17, 23)))
    pal = img.convert("P", palette=Image.ADAPTIVE, colors=50)
    pal_t = pal.copy()
    pal_t.info["transparency"] = 3
    return [("rgb.png", img, {}), ("l.png", img.convert("L"), {}), ("rgba.png", rgba, {}),
            ("la.png", rgba.convert("LA"), {}), ("p.png", pal, {}),
            ("p-trns.png", pal_t, dict(transparency=3)), ("one.png", img.convert("1"), {}),
            ("i16.png", img.convert("I").point(lambda v: v * 200).convert("I;16"), {})]


@pytest.fixture(scope="module")
def variants(session_dir):
    tree = session_dir / "variants"
    os.makedirs(tree / "jpeg")
    os.makedirs(tree / "png")
    os.makedirs(tree / "bad")
    fast = []
    for name, img, opts, is_fast in jpeg_variants():
        img.save(tree / "jpeg" / name, "JPEG", **opts)
        if is_fast:
            fast.append(f"jpeg/{name}")
    for name, img, opts in png_variants():
        img.save(tree / "png" / name, "PNG", **opts)
    good = io.BytesIO()
    photo_like(40, 30, 70).save(good, "JPEG")
    whole = good.getvalue()
    (tree / "bad" / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (tree / "bad" / "garbage.jpg").write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(200))
    sof = whole.index(b"\xff\xc0")  # baseline SOF: length (2 bytes), then the precision
    (tree / "bad" / "twelve-bit.jpg").write_bytes(whole[: sof + 4] + b"\x0c" + whole[sof + 5:])
    (tree / "bad" / "flipped.jpg").write_bytes(whole[:400] + bytes(b ^ 0x5A for b in whole[400:600]) + whole[600:])
    return str(tree), dsfs.Store(pack(tree, session_dir / "variants.db")), fast


def load(ds, i):
    """The image at i, or the type of what loading it raised."""
    try:
        return ds[i][0]
    except Exception as e:  # noqa: BLE001: the kind of error is what is compared
        return type(e)


@pytest.mark.parametrize("cls", [dt.ImageFolder, dt.PixelImageFolder,
                                 lambda s: dt.PixelImageFolder(s, keep=True)])
def test_images_equal_torchvision_pil_loader(variants, cls):
    tree, store, _ = variants
    ours = cls(store)
    theirs = torchvision.datasets.ImageFolder(tree)
    assert [p for p, _ in ours.samples] == [os.path.relpath(p, tree) for p, _ in theirs.samples]
    errors = 0
    for i in list(range(len(ours))) * 2:  # the second time from the RAM cache (keep=True)
        a, b = load(ours, i), load(theirs, i)
        if isinstance(b, type):
            errors += 1
            assert a is b, ours.samples[i]
            continue
        assert isinstance(a, Image.Image), ours.samples[i]
        assert a.mode == b.mode == "RGB" and a.size == b.size, ours.samples[i]
        assert np.array_equal(np.asarray(a), np.asarray(b)), ours.samples[i]
    assert errors >= 6  # the truncated, garbage and 12-bit files raise in both (twice)


def test_fast_path_taken_for_exact_jpegs_only(variants):
    tree, store, fast = variants
    assert len(fast) > 30
    for path in fast:
        assert store._pixels(path) is not None, path
    for path in ("jpeg/cmyk.jpg", "bad/truncated.jpg", "bad/garbage.jpg", "bad/twelve-bit.jpg",
                 "png/i16.png"):
        assert store._pixels(path) is None, path
    with pytest.raises(IsADirectoryError):
        store._pixels("jpeg")
    with pytest.raises(FileNotFoundError):
        store._pixels("jpeg/missing.jpg")


def test_custom_loader_gets_a_file_object(variants):
    tree, store, _ = variants
    seen = []

    def loader(f):
        seen.append(f.read(2))
        return "x"

    ds = dt.ImageFolder(store, loader=loader)
    assert ds[0][0] == "x" and seen == [b"\xff\xd8"]
