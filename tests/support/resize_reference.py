#!/usr/bin/python3
"""The reference corpus of tests/unit/resize_test.cc: what the real Pillow and torchvision give.

Usage: resize_reference.py OUTDIR       (run with /usr/bin/python3: Debian's Pillow, torchvision)
       resize_reference.py --check-jpeg FILE W H RGB

OUTDIR receives source images (PNG and JPEG files, in the modes image/image.cc decodes) and
manifest.txt, one line per check:
  resize SRC N W H PIXELS   torchvision.transforms.Resize(N)(Image.open(SRC).convert("RGB")) is
                            W x H with the raw RGB bytes in PIXELS ("-": not written, too large)
  scale SRC W H PIXELS      Image.open(SRC).convert("RGB").resize((W, H), Image.BILINEAR)
Exit status 77 (and a line on stderr) where Pillow or torchvision is missing.
--check-jpeg opens FILE with PIL and exits 0 if it is a W x H JPEG, writing its pixels
(convert("RGB")) to RGB.
Deterministic: every image comes from a fixed seed.
"""
import os
import sys

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover
    print(f"SKIPPED: no Pillow/numpy for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(77)

SIZES_N = [16, 17, 32, 224, 256, 300, 4096]
# Raw pixels are written for every reduction, and for the other outputs (enlargements, the same
# size) up to this many pixels (a 1x1 image at N=4096 would be 48 MiB: only its size is checked).
MAX_WRITTEN_PIXELS = 1 << 17


def noise(w, h, seed):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def gradient(w, h, seed):
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // max(w - 1, 1) + seed) % 256
    g = (y * 255 // max(h - 1, 1) + 3 * seed) % 256
    b = ((x + y) * 7 + seed) % 256
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


def photo(w, h, seed):
    """Smooth content plus mild noise: what JPEG is made for."""
    base = gradient(w, h, seed).astype(np.int16)
    rng = np.random.default_rng(seed + 1000)
    return np.clip(base + rng.integers(-12, 13, (h, w, 3)), 0, 255).astype(np.uint8)


def check_jpeg(path, w, h, rgb_path):
    with Image.open(path) as im:
        if im.format != "JPEG" or im.size != (w, h):
            print(f"{path}: {im.format} {im.size}, expected JPEG {(w, h)}", file=sys.stderr)
            return 1
        with open(rgb_path, "wb") as f:
            f.write(im.convert("RGB").tobytes())
    return 0


def main(out):
    try:
        import torchvision.transforms as T
        from torchvision.transforms import InterpolationMode
    except ImportError as e:  # pragma: no cover
        print(f"SKIPPED: no torchvision for {sys.executable}: {e}", file=sys.stderr)
        return 77
    os.makedirs(out, exist_ok=True)
    sources = []  # file names in `out`

    def save(name, im, **kw):
        im.save(os.path.join(out, name), **kw)
        sources.append(name)

    # Synthetic RGB images of odd sizes, kept lossless as PNG.
    synth = [(1, 1), (1, 700), (700, 1), (2, 3000), (3000, 2), (17, 23), (333, 500), (500, 375),
             (801, 600), (4097, 3), (256, 300), (300, 300)]
    for i, (w, h) in enumerate(synth):
        save(f"noise_{w}x{h}.png", Image.fromarray(noise(w, h, i)), compress_level=1)
        if w * h >= 100:
            save(f"gradient_{w}x{h}.png", Image.fromarray(gradient(w, h, i)), compress_level=1)

    # Real files in the modes DecodeImage accepts.
    pic = Image.fromarray(photo(500, 375, 7))
    save("photo_420.jpg", pic, quality=90, subsampling=2)
    save("photo_444.jpg", Image.fromarray(photo(333, 500, 8)), quality=85, subsampling=0)
    save("photo_gray.jpg", Image.fromarray(photo(401, 299, 9)).convert("L"), quality=90)
    save("photo_progressive.jpg", Image.fromarray(photo(640, 480, 10)), quality=80,
         progressive=True)
    save("photo_rgb.png", Image.fromarray(photo(257, 129, 11)), compress_level=1)
    save("photo_palette.png", Image.fromarray(photo(300, 200, 12)).quantize(colors=200),
         compress_level=1)
    save("photo_gray.png", Image.fromarray(photo(123, 456, 13)).convert("L"), compress_level=1)
    rgba = Image.fromarray(photo(310, 230, 14)).convert("RGBA")
    rgba.putalpha(Image.fromarray(noise(310, 230, 15)[:, :, 0]))
    save("photo_rgba.png", rgba, compress_level=1)
    # Large reductions: 4000 wide to 16 high and beyond.
    save("wide_4000x300.png", Image.fromarray(photo(4000, 300, 16)), compress_level=1)

    lines = []
    for name in sources:
        with Image.open(os.path.join(out, name)) as f:
            rgb = f.convert("RGB")
        for n in SIZES_N:
            short = min(rgb.size)
            # The size torchvision gives, from torchvision itself; its pixels where not huge.
            size = T.functional._compute_resized_output_size(rgb.size[::-1], [n])
            w, h = size[1], size[0]
            pixels = "-"
            if short > n or w * h <= MAX_WRITTEN_PIXELS:
                res = T.Resize(n, interpolation=InterpolationMode.BILINEAR)(rgb)
                assert res.size == (w, h), (name, n, res.size, (w, h))
                pixels = f"{name}.r{n}.rgb"
                with open(os.path.join(out, pixels), "wb") as p:
                    p.write(res.tobytes())
            lines.append(f"resize {name} {n} {w} {h} {pixels}")

    # Image.resize itself, beyond what Resize(n) asks: large factors both ways, upscaling,
    # one dimension only, sizes 1.
    scales = [
        ("wide_4000x300.png", 16, 12), ("wide_4000x300.png", 16, 300), ("wide_4000x300.png", 4000, 7),
        ("wide_4000x300.png", 1, 1), ("wide_4000x300.png", 3999, 301),
        ("noise_17x23.png", 170, 230), ("noise_17x23.png", 1000, 5), ("noise_17x23.png", 18, 23),
        ("noise_1x1.png", 5, 7), ("noise_1x700.png", 3, 9), ("noise_700x1.png", 350, 2),
        ("photo_420.jpg", 341, 256), ("photo_420.jpg", 1000, 750), ("photo_420.jpg", 499, 376),
        ("photo_420.jpg", 16, 16), ("gradient_801x600.png", 64, 2000),
    ]
    # And random sizes both ways from one odd-sized image (window ends fall everywhere).
    save("noise_613x457.png", Image.fromarray(noise(613, 457, 99)), compress_level=1)
    rng = np.random.default_rng(1234)
    for _ in range(40):
        scales.append(("noise_613x457.png", int(rng.integers(1, 400)), int(rng.integers(1, 400))))
    for name, w, h in scales:
        with Image.open(os.path.join(out, name)) as f:
            res = f.convert("RGB").resize((w, h), Image.BILINEAR)
        pixels = f"{name}.s{w}x{h}.rgb"
        with open(os.path.join(out, pixels), "wb") as p:
            p.write(res.tobytes())
        lines.append(f"scale {name} {w} {h} {pixels}")

    with open(os.path.join(out, "manifest.txt"), "w") as m:
        m.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--check-jpeg":
        sys.exit(check_jpeg(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
