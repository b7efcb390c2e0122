"""Build a large store honestly: real JPEG files on disk, then ``gradpick infer`` over them.

CIFAR-10's training images are re-sampled into an ImageFolder tree of ``--images`` files: image
i is a seeded choice of a source image, a seeded crop of it (a square of 24 to 32 pixels at a
seeded place, resized back to 32 by 32) and a seeded horizontal flip, written as a JPEG under
its class's folder. The same seed writes the same files. The tree is written into
``FOLDER.partial`` and renamed when complete, so an interrupted run leaves no folder that looks
complete. Then, unless ``--no-infer``, the shipped model's outputs and embeddings are stored
from it, as a user would: ``gradpick infer --data FOLDER --out STORE --embeddings``.

    PYTHONPATH=src python tools/build_large_store.py --images 200000 \\
        --folder runs/images200k --out runs/store200k
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SIDE = 32
SMALLEST_CROP = 24


def write_folder(source: Path, folder: Path, images: int, seed: int = 0) -> None:
    """``images`` re-sampled JPEGs of the ImageFolder tree ``source`` under ``folder`` (see the
    module doc), written whole or not at all."""
    classes = sorted(entry.name for entry in source.iterdir() if entry.is_dir())
    files = [
        (label, path)
        for label, name in enumerate(classes)
        for path in sorted((source / name).iterdir())
    ]
    if not files:
        raise SystemExit(f"{source}: no images in class folders")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for name in classes:
        (partial / name).mkdir(parents=True)
    generator = np.random.default_rng(seed)
    chosen = generator.integers(0, len(files), images)
    sides = generator.integers(SMALLEST_CROP, SIDE + 1, images)
    corners = generator.random((images, 2))
    flips = generator.random(images) < 0.5
    width = len(str(images - 1))
    started = time.perf_counter()
    for index in range(images):
        label, path = files[int(chosen[index])]
        with Image.open(path) as opened:
            image = opened.convert("RGB")
        side = int(sides[index])
        left = int(corners[index, 0] * (image.width - side + 1))
        top = int(corners[index, 1] * (image.height - side + 1))
        image = image.crop((left, top, left + side, top + side)).resize(
            (SIDE, SIDE), Image.BILINEAR
        )
        if flips[index]:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        image.save(partial / classes[label] / f"{index:0{width}d}.jpg", quality=95)
        if (index + 1) % 10_000 == 0:
            rate = (index + 1) / (time.perf_counter() - started)
            print(f"wrote {index + 1:,} of {images:,} images ({rate:,.0f}/s)", file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, required=True, help="files to write (e.g. 200000)")
    parser.add_argument("--folder", required=True, help="the ImageFolder tree to write")
    parser.add_argument("--out", help="the store to write from it (gradpick infer --out)")
    parser.add_argument(
        "--source",
        help="an ImageFolder tree to re-sample (default: $GRADPICK_CIFAR10_DIR/train)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-infer", action="store_true", help="write the folder only")
    args = parser.parse_args(argv)
    source = Path(args.source or Path(os.environ.get("GRADPICK_CIFAR10_DIR", "")) / "train")
    if not source.is_dir():
        raise SystemExit(f"{source}: no such folder; give --source or set $GRADPICK_CIFAR10_DIR")
    folder = Path(args.folder)
    started = time.perf_counter()
    write_folder(source, folder, args.images, args.seed)
    print(f"wrote {args.images:,} images to {folder} in {time.perf_counter() - started:,.1f} s")
    if args.no_infer:
        return 0
    if not args.out:
        raise SystemExit("give --out STORE, or --no-infer")
    sys.path.insert(0, str(ROOT / "src"))
    from gradpick.cli import main as gradpick

    return gradpick(["infer", "--data", str(folder), "--out", args.out, "--embeddings"])


if __name__ == "__main__":
    raise SystemExit(main())
