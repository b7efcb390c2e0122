"""Draw occlusion beside Grad-CAM on planted errors with the explorer's own tile renderer.

The first planted error of each mark (the order ``gradpick bench-planted`` scores them in, no
choosing), one row each: the image with the mark outlined, Grad-CAM's overlay and occlusion
6x6's overlay (``gradpick.ui.heatmaps.tiles``, one colour scale per map as the explorer draws
them), each labelled with whether its maximum is on the mark (the pointing game, 2 px).

    python tools/planted_screenshot.py --data DIR --planted-weights runs/planted/x.pt \
        --out artifacts/occlusion-beside-gradcam.png
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from PIL import Image, ImageDraw

from gradpick import attribution, data
from gradpick.bench import planted
from gradpick.data.planted import FEATURES
from gradpick.gradients.request import GradientRequest
from gradpick.models import shipped as models
from gradpick.ui.heatmaps import DISPLAY_SIDE, tiles

LABEL = 18
GAP = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--planted-weights", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model = models.load("resnet20", args.planted_weights)
    test = data.load_batch(data.open_source(args.data, "test"), size=args.images, seed=args.seed)
    errors = planted.planted_errors(model, test, most=64, seed=args.seed + 1)
    first = [errors.features.index(name) for name in FEATURES if name in errors.features]
    images, masks = errors.images[first], errors.masks[first]
    called = errors.called[first]
    request = GradientRequest.build(
        model, images, list(range(len(first))), target="logit", classes=called
    )
    methods = {
        "Grad-CAM": attribution.GradCAM(),
        "occlusion 6x6": attribution.Occlusion(window=6, stride=2),
    }
    pixels = (images * 255).round().to(torch.uint8)
    maps = {name: method.attribute(request).maps for name, method in methods.items()}
    columns = {name: tiles(pixels, found, False) for name, found in maps.items()}
    hits = {name: planted.pointing(found, masks) for name, found in maps.items()}
    side = columns["Grad-CAM"][0].image.shape[0]
    scale = side // images.shape[-1]
    width = 3 * side + 2 * GAP + 24
    canvas = Image.new("RGB", (width, len(first) * (side + LABEL + GAP)), "white")
    draw = ImageDraw.Draw(canvas)
    for row, number in enumerate(first):
        top = row * (side + LABEL + GAP)
        feature = errors.features[number]
        name = test.class_names[int(called[row])]
        image = Image.fromarray(columns["Grad-CAM"][row].image)
        canvas.paste(image, (0, top + LABEL))
        ys, xs = np.nonzero(masks[row].numpy())
        box = (xs.min() * scale - 2, top + LABEL + ys.min() * scale - 2,
               (xs.max() + 1) * scale + 1, top + LABEL + (ys.max() + 1) * scale + 1)  # fmt: skip
        draw.rectangle(box, outline=(0, 255, 0), width=2)
        draw.text((2, top + 3), f"{feature} -> called {name}", fill="black")
        for column, method in enumerate(methods, start=1):
            left = column * (side + GAP)
            canvas.paste(Image.fromarray(columns[method][row].overlay), (left, top + LABEL))
            where = "on the mark" if bool(hits[method][row]) else "off the mark"
            draw.text((left + 2, top + 3), f"{method}: {where}", fill="black")
    canvas.save(args.out)
    print(f"wrote {args.out} ({DISPLAY_SIDE}-px tiles, {len(first)} planted errors)")


if __name__ == "__main__":
    main()
