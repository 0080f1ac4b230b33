#!/usr/bin/python3
"""Builds the benchmark datasets of dsfs as ImageFolder trees (run with /usr/bin/python3).

  fashion-mnist OUT [--limit N]
      Debian's dataset-fashion-mnist (train + test, 70,000 images) as 28x28 grayscale PNGs:
      OUT/<class name>/<train|test>_<index>.png  (index within its split, 5 digits).

  photo-crops OUT [--count N] [--size 32] [--seed S]
      N JPEG crops of real photographs shipped in Debian wallpaper packages, spread over 100
      class directories: OUT/class_XXX/img_XXXXXXX.jpg. Each crop takes a random region at a
      random scale (log-uniform, from 1/20 of the short side up to all of it), mirrors it half of the
      time and downscales it to SIZE x SIZE; it is saved at quality 88-92, mostly 4:2:0
      baseline, some progressive, some 4:4:4 and 4:2:2, a few grayscale. File i depends only
      on (seed, i, the photo list), so a tree is the same on every machine.

  photos OUT [--count N] [--min-side 300] [--max-side 800] [--quality 90] [--seed S]
      N photographs at ImageNet-like sizes, cut from the same Debian wallpapers as photo-crops,
      in 100 class directories (OUT/class_XXX/img_XXXXXXX.jpg): each is a random region (at
      least its output size, up to the whole short side), its longer side MIN..MAX px and its
      aspect 1 to 4/3 either way round (the shorter side at least MIN), resampled with LANCZOS,
      mirrored half of the time, saved as baseline 4:2:0 JPEG of QUALITY. For the resized views.

  smooth-crops OUT [--count N] [--size 32] [--seed S]
      N synthetic JPEGs of SIZE x SIZE in 100 class directories (OUT/class_XXX/img_XXXXXXX.jpg)
      for machines without the wallpaper packages: a random 3x3 to 8x8 colour grid upscaled
      bicubically (smooth gradients), plus Gaussian noise of sigma 2-10, saved at quality 85-92
      (about 1 KB each at 32x32, like the photo crops). File i depends only on (seed, i).

  blob OUT --from DIR [--from DIR ...] [--size 1G] [--seed S]
      One large file OUT/shard_000.bin of SIZE bytes: the files under the DIRs (e.g. the photo32
      JPEGs and Fashion-MNIST PNGs), concatenated in a new shuffled order on each round until
      SIZE is reached, like an uncompressed tar/WebDataset shard of images: partly compressible.

  random-files OUT [--count N] [--file-size 64K] [--seed S]
      N files of SIZE pseudo-random bytes (incompressible) in 100 directories:
      OUT/dir_XXX/file_XXXXXXX.bin. For the cache budget benchmark.

  sources
      Lists the photographs photo-crops would use and whether they are installed.

Both build into OUT.partial and rename it to OUT when done, then write OUT.dataset.json beside
it (not inside: the tree must hold only images). A tree whose stamp matches the parameters is
kept as it is. An OUT without a stamp is not touched unless --force is given.
"""
import argparse
import gzip
import io
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import sys
import time

import numpy as np
from PIL import Image

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
FMNIST_CLASSES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
                  "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"]

# Real photographs (not renders, paintings or logos), picked by looking at every image these
# packages install. The package is named so that bench/setup.sh can install it.
PHOTOS = [
    # mate-backgrounds: macro and nature photographs
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/Aqua.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/Blinds.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/Dune.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/FreshFlower.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/Garden.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/GreenMeadow.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/LadyBird.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/RainDrops.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/Storm.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/TwoWings.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/Wood.jpg"),
    ("mate-backgrounds", "/usr/share/backgrounds/mate/nature/YellowFlower.jpg"),
    # lomiri-wallpapers-16.04 (pulled in by lomiri-wallpapers): Ubuntu community photographs
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/Bridge_by_Sander_Klootwijk.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/Dragonfly_by_Bolly.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/Kleiber_by_Lukas_Baubkus.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/Picture_0B_by_freespace.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/Picture_1A_by_freespace.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/Wine_by_Jakkub_Mede.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/aitzgorri_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/free_by_Peter_Nerlich.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/friends_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/life_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/picosdeeuropa_by_Aitzol_Berasategi.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/seeding_by_Clements_Engelhardt.jpg"),
    ("lomiri-wallpapers-16.04", "/usr/share/backgrounds/sunset_by_Aitzol_Berasategi.jpg"),
    # plasma-workspace-wallpapers: the photographic ones (largest size of each)
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/BytheWater/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/ColdRipple/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/ColorfulCups/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/DarkestHour/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/EveningGlow/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/FallenLeaf/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/Grey/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/Kite/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/OneStandsOut/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/Path/contents/images/2560x1600.jpg"),
    ("plasma-workspace-wallpapers", "/usr/share/wallpapers/summer_1am/contents/images/2560x1600.jpg"),
]
MIN_PHOTOS = 10
N_CLASSES = 100
CHUNK = 500


def log(msg):
    print(f"datasets: {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# Tree bookkeeping: build into OUT.partial, rename, stamp.

def stamp_path(out):
    return out.rstrip("/") + ".dataset.json"


def is_complete(out, params):
    try:
        with open(stamp_path(out)) as f:
            stamp = json.load(f)
    except (OSError, ValueError):
        return False
    return stamp.get("params") == params and os.path.isdir(out)


def begin(out, params, force):
    """Returns the partial directory to fill, or None when OUT is already complete."""
    out = out.rstrip("/")
    if is_complete(out, params) and not force:
        log(f"{out} is complete ({stamp_path(out)}), kept")
        return None
    if os.path.exists(out):
        if not force and not os.path.exists(stamp_path(out)):
            sys.exit(f"datasets: {out} exists and has no stamp {stamp_path(out)}; "
                     "use --force to replace it")
        log(f"replacing {out}")
        shutil.rmtree(out)
    if os.path.exists(stamp_path(out)):
        os.unlink(stamp_path(out))
    partial = out + ".partial"
    if os.path.exists(partial):
        shutil.rmtree(partial)
    os.makedirs(partial)
    return partial


def finish(out, partial, params, files, nbytes, t0):
    out = out.rstrip("/")
    os.rename(partial, out)
    stamp = {"params": params, "files": files, "bytes": nbytes,
             "seconds": round(time.monotonic() - t0, 2)}
    with open(stamp_path(out) + ".tmp", "w") as f:
        json.dump(stamp, f, indent=1)
    os.rename(stamp_path(out) + ".tmp", stamp_path(out))
    log(f"{out}: {files} files, {nbytes / 1e6:.1f} MB in {stamp['seconds']} s")
    print(json.dumps({"dataset": out, **stamp}))


# ----------------------------------------------------------------------------------------------
# Fashion-MNIST

def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


_FM = {}


def _fm_work(args):
    lo, hi = args
    nbytes = 0
    for k in range(lo, hi):
        split, idx, label, img = _FM["items"][k]
        path = os.path.join(_FM["root"], FMNIST_CLASSES[label], f"{split}_{idx:05d}.png")
        Image.fromarray(img, "L").save(path, "PNG")
        nbytes += os.path.getsize(path)
    return hi - lo, nbytes


def cmd_fashion_mnist(a):
    params = {"kind": "fashion-mnist", "limit": a.limit, "layout": "class/split_index.png"}
    t0 = time.monotonic()
    partial = begin(a.out, params, a.force)
    if partial is None:
        return
    items = []
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(os.path.join(FMNIST_DIR, f"{prefix}-images-idx3-ubyte.gz"))
        labels = read_idx(os.path.join(FMNIST_DIR, f"{prefix}-labels-idx1-ubyte.gz"))
        assert images.shape[0] == labels.shape[0] and images.shape[1:] == (28, 28)
        items += [(split, i, int(labels[i]), images[i]) for i in range(images.shape[0])]
    if a.limit:
        items = items[:a.limit]
    for c in FMNIST_CLASSES:
        os.makedirs(os.path.join(partial, c))
    _FM["items"] = items
    _FM["root"] = partial
    chunks = [(lo, min(lo + CHUNK * 2, len(items))) for lo in range(0, len(items), CHUNK * 2)]
    files = nbytes = 0
    with mp.get_context("fork").Pool(a.jobs) as pool:
        for n, b in pool.imap_unordered(_fm_work, chunks):
            files += n
            nbytes += b
    assert files == len(items)
    finish(a.out, partial, params, files, nbytes, t0)


# ----------------------------------------------------------------------------------------------
# Photo crops

_PC = {}


def load_pyramid(path):
    """Full-resolution RGB image and its 2x reductions down to a short side of 64 px."""
    im = Image.open(path)
    im = im.convert("RGB")
    levels = [im]
    while min(levels[-1].size) >= 128:
        levels.append(levels[-1].reduce(2))
    return levels


def make_crop(i):
    """The bytes of crop i and its JPEG settings (deterministic in seed, i, photo list)."""
    rng = random.Random(f"dsfs-photo-crops:{_PC['seed']}:{i}")
    size = _PC["size"]
    levels = _PC["pyramids"][rng.randrange(len(_PC["pyramids"]))]
    W, H = levels[0].size
    short = min(W, H)
    side = math.exp(rng.uniform(math.log(max(size, short / 20)), math.log(short)))
    aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
    w = min(W, side * math.sqrt(aspect))
    h = min(H, side / math.sqrt(aspect))
    x = rng.uniform(0, W - w)
    y = rng.uniform(0, H - h)
    # The smallest pyramid level that still has at least 2x the target size in the region.
    k = 0
    while k + 1 < len(levels) and min(w, h) / 2 ** (k + 1) >= 2 * size:
        k += 1
    s = 2 ** k
    resample = rng.choice([Image.BICUBIC, Image.LANCZOS, Image.BILINEAR, Image.BOX])
    crop = levels[k].resize((size, size), resample, box=(x / s, y / s, (x + w) / s, (y + h) / s))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    quality = rng.randint(88, 92)
    r = rng.random()
    kw = {"quality": quality}
    if r < 0.04:
        crop = crop.convert("L")
        kw["progressive"] = rng.random() < 0.25
        kind = "gray"
    else:
        r2 = rng.random()
        kw["subsampling"] = 0 if r2 < 0.12 else (1 if r2 < 0.15 else 2)
        kw["progressive"] = rng.random() < 0.10
        kind = {0: "444", 1: "422", 2: "420"}[kw["subsampling"]]
    if kw["progressive"]:
        kind += "p"
    return crop, kw, kind


def make_photo(i):
    """Photo i of `photos` (deterministic in seed, i, the photo list)."""
    rng = random.Random(f"dsfs-photos:{_PC['seed']}:{i}")
    lo, hi = _PC["sides"]
    levels = _PC["pyramids"][rng.randrange(len(_PC["pyramids"]))]
    W, H = levels[0].size
    long_side = rng.randint(lo, hi)
    short_side = max(lo, round(long_side / rng.uniform(1, 4 / 3)))
    ow, oh = (long_side, short_side) if rng.random() < 0.7 else (short_side, long_side)
    # The region: the output's aspect, from the output size (or what the photo has) up to all
    # of the photo along its tighter side.
    fit = min(W / ow, H / oh)
    scale = math.exp(rng.uniform(math.log(min(1.0, fit)), math.log(fit)))
    w, h = ow * scale, oh * scale
    x = rng.uniform(0, W - w)
    y = rng.uniform(0, H - h)
    k = 0
    while k + 1 < len(levels) and min(w / ow, h / oh) / 2 ** (k + 1) >= 2:
        k += 1
    s = 2 ** k
    img = levels[k].resize((ow, oh), Image.LANCZOS, box=(x / s, y / s, (x + w) / s, (y + h) / s))
    if rng.random() < 0.5:
        img = img.transpose(Image.FLIP_LEFT_RIGHT)
    return img


def _photo_work(args):
    lo, hi = args
    nbytes = 0
    for i in range(lo, hi):
        path = os.path.join(_PC["root"], f"class_{i % N_CLASSES:03d}", f"img_{i:07d}.jpg")
        make_photo(i).save(path, "JPEG", quality=_PC["quality"], subsampling=2)
        nbytes += os.path.getsize(path)
    return hi - lo, nbytes, {}


def _pc_work(args):
    lo, hi = args
    nbytes = 0
    kinds = {}
    root = _PC["root"]
    for i in range(lo, hi):
        crop, kw, kind = make_crop(i)
        path = os.path.join(root, f"class_{i % N_CLASSES:03d}", f"img_{i:07d}.jpg")
        crop.save(path, "JPEG", **kw)
        nbytes += os.path.getsize(path)
        kinds[kind] = kinds.get(kind, 0) + 1
    return hi - lo, nbytes, kinds


def available_photos():
    return [p for _, p in PHOTOS if os.path.isfile(p)]


def cmd_sources(a):
    for pkg, p in PHOTOS:
        print(f"{'ok     ' if os.path.isfile(p) else 'MISSING'} {pkg:28s} {p}")
    n = len(available_photos())
    print(f"{n} of {len(PHOTOS)} photographs installed (photo-crops needs {MIN_PHOTOS})")


def photo_names(photos):
    return [os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(p))))
            if "/wallpapers/" in p else os.path.basename(p) for p in photos]


def cmd_photos(a):
    photos = available_photos()
    if len(photos) < MIN_PHOTOS:
        sys.exit(f"datasets: only {len(photos)} of the photographs are installed; "
                 "run bench/setup.sh (or see `datasets.py sources`)")
    if not 16 <= a.min_side <= a.max_side:
        sys.exit("datasets: --min-side must be at least 16 and at most --max-side")
    params = {"kind": "photos", "count": a.count, "sides": [a.min_side, a.max_side],
              "quality": a.quality, "seed": a.seed, "photos": photo_names(photos), "version": 1}
    run_photo_tree(a, photos, params, _photo_work,
                   {"sides": (a.min_side, a.max_side), "quality": a.quality})


def cmd_photo_crops(a):
    photos = available_photos()
    if len(photos) < MIN_PHOTOS:
        sys.exit(f"datasets: only {len(photos)} of the photographs are installed; "
                 "run bench/setup.sh (or see `datasets.py sources`)")
    params = {"kind": "photo-crops", "count": a.count, "size": a.size, "seed": a.seed,
              "photos": photo_names(photos), "version": 1}
    run_photo_tree(a, photos, params, _pc_work, {"size": a.size})


def run_photo_tree(a, photos, params, work, settings):
    """Builds a tree of photographs with `work` over chunks of indices."""
    t0 = time.monotonic()
    partial = begin(a.out, params, a.force)
    if partial is None:
        return
    if len(photos) < len(PHOTOS):
        log(f"using {len(photos)} of {len(PHOTOS)} photographs (the others are not installed)")
    # Decode the photographs once, in the parent: forked workers share the pixels.
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(a.jobs) as ex:
        _PC["pyramids"] = list(ex.map(load_pyramid, photos))
    log(f"decoded {len(photos)} photographs in {time.monotonic() - t0:.1f} s")
    _PC["seed"] = a.seed
    _PC.update(settings)
    _PC["root"] = partial
    for c in range(N_CLASSES):
        os.makedirs(os.path.join(partial, f"class_{c:03d}"))
    chunks = [(lo, min(lo + CHUNK, a.count)) for lo in range(0, a.count, CHUNK)]
    files = nbytes = 0
    kinds = {}
    last = time.monotonic()
    with mp.get_context("fork").Pool(a.jobs) as pool:
        for n, b, k in pool.imap_unordered(work, chunks):
            files += n
            nbytes += b
            for key, v in k.items():
                kinds[key] = kinds.get(key, 0) + v
            if time.monotonic() - last > 10:
                last = time.monotonic()
                log(f"{files}/{a.count} images")
    assert files == a.count
    if kinds:
        log("JPEG kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    finish(a.out, partial, params, files, nbytes, t0)


# ----------------------------------------------------------------------------------------------
# One large file; many random files

def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").rstrip("I")
    return int(float(t[:-1]) * mult[t[-1]]) if t and t[-1] in mult else int(t)


def cmd_blob(a):
    size = parse_size(a.size)
    params = {"kind": "blob", "size": size, "seed": a.seed,
              "from": [os.path.basename(d.rstrip("/")) for d in a.sources], "version": 1}
    t0 = time.monotonic()
    partial = begin(a.out, params, a.force)
    if partial is None:
        return
    paths = []
    for d in a.sources:
        for root, _, names in os.walk(d):
            paths += [os.path.join(root, n) for n in names]
    paths.sort()
    if not paths:
        sys.exit(f"datasets: no files under {a.sources}")
    blobs = []
    for p in paths:
        with open(p, "rb") as f:
            blobs.append(f.read())
    rng = random.Random(f"dsfs-blob:{a.seed}")
    written = 0
    with open(os.path.join(partial, "shard_000.bin"), "wb") as out:
        while written < size:
            order = list(range(len(blobs)))
            rng.shuffle(order)
            for i in order:
                b = blobs[i][: size - written]
                out.write(b)
                written += len(b)
                if written >= size:
                    break
    finish(a.out, partial, params, 1, written, t0)


def make_smooth(seed, i, size):
    rng = np.random.default_rng([seed, i])
    k = int(rng.integers(3, 9))
    grid = rng.integers(0, 256, (k, k, 3), dtype=np.uint8)
    im = np.asarray(Image.fromarray(grid).resize((size, size), Image.BICUBIC)).astype(np.int16)
    im = im + rng.normal(0, float(rng.uniform(2, 10)), im.shape).astype(np.int16)
    out = io.BytesIO()
    Image.fromarray(np.clip(im, 0, 255).astype(np.uint8)).save(
        out, "JPEG", quality=int(rng.integers(85, 93)))
    return out.getvalue()


def cmd_smooth_crops(a):
    params = {"kind": "smooth-crops", "count": a.count, "size": a.size, "seed": a.seed,
              "version": 1}
    t0 = time.monotonic()
    partial = begin(a.out, params, a.force)
    if partial is None:
        return
    for c in range(N_CLASSES):
        os.makedirs(os.path.join(partial, f"class_{c:03d}"))
    nbytes = 0
    for i in range(a.count):
        data = make_smooth(a.seed, i, a.size)
        nbytes += len(data)
        with open(os.path.join(partial, f"class_{i % N_CLASSES:03d}", f"img_{i:07d}.jpg"), "wb") as f:
            f.write(data)
    finish(a.out, partial, params, a.count, nbytes, t0)


def cmd_random_files(a):
    fsize = parse_size(a.file_size)
    params = {"kind": "random-files", "count": a.count, "file_size": fsize, "seed": a.seed,
              "version": 1}
    t0 = time.monotonic()
    partial = begin(a.out, params, a.force)
    if partial is None:
        return
    rng = np.random.default_rng(a.seed)
    for c in range(N_CLASSES):
        os.makedirs(os.path.join(partial, f"dir_{c:03d}"))
    for i in range(a.count):
        with open(os.path.join(partial, f"dir_{i % N_CLASSES:03d}", f"file_{i:07d}.bin"), "wb") as f:
            f.write(rng.integers(0, 256, fsize, dtype=np.uint8).tobytes())
    finish(a.out, partial, params, a.count, a.count * fsize, t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fashion-mnist", help="Fashion-MNIST as 28x28 PNGs")
    f.add_argument("out")
    f.add_argument("--limit", type=int, default=0, help="only the first N images (train first)")
    p = sub.add_parser("photo-crops", help="JPEG crops of real photographs")
    p.add_argument("out")
    p.add_argument("--count", type=int, default=150000)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    b = sub.add_parser("blob", help="one large file of concatenated images")
    ph = sub.add_parser("photos", help="photographs at ImageNet-like sizes (300-800 px)")
    ph.add_argument("out")
    ph.add_argument("--count", type=int, default=20000)
    ph.add_argument("--min-side", type=int, default=300)
    ph.add_argument("--max-side", type=int, default=800)
    ph.add_argument("--quality", type=int, default=90)
    ph.add_argument("--seed", type=int, default=1)
    b.add_argument("out")
    b.add_argument("--from", dest="sources", action="append", required=True)
    b.add_argument("--size", default="1G")
    b.add_argument("--seed", type=int, default=1)
    b.add_argument("--force", action="store_true", help="rebuild even if complete")
    sc = sub.add_parser("smooth-crops", help="synthetic ~1 KB JPEGs (no photographs needed)")
    sc.add_argument("out")
    sc.add_argument("--count", type=int, default=50000)
    sc.add_argument("--size", type=int, default=32)
    sc.add_argument("--seed", type=int, default=1)
    sc.add_argument("--force", action="store_true", help="rebuild even if complete")
    r = sub.add_parser("random-files", help="many files of random bytes")
    r.add_argument("out")
    r.add_argument("--count", type=int, default=11000)
    r.add_argument("--file-size", default="64K")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--force", action="store_true", help="rebuild even if complete")
    for s in (f, p, ph):
        s.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                       help="worker processes (default: 2)")
        s.add_argument("--force", action="store_true", help="rebuild even if complete")
    sub.add_parser("sources", help="list the photographs photo-crops uses")
    a = ap.parse_args()
    {"fashion-mnist": cmd_fashion_mnist, "photo-crops": cmd_photo_crops, "photos": cmd_photos,
     "sources": cmd_sources,
     "blob": cmd_blob, "random-files": cmd_random_files, "smooth-crops": cmd_smooth_crops}[a.cmd](a)


if __name__ == "__main__":
    main()
