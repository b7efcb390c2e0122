"""A torchvision ResNet-18 trained briefly on CIFAR-10 for 224-px use (no ImageNet weights offline).

The badge calibration needs known-good maps of a trained 224-px model; without internet there
are no ImageNet weights, so this trains one from random init on CIFAR-10 in two stages on the
CPU: most steps at 48 px (cheap: a 224-px step costs 20 times more), then a
short fine-tune at 224 px, the images upsampled to 256 and cropped to 224 as
``torchvision:resnet18``'s input spec does. The weights are those of the bare torchvision module
(``load_model("torchvision:resnet18", weights=...)`` adds the ImageNet normalisation in front).

    GRADPICK_CIFAR10_DIR=... python tools/train_resnet18_cifar224.py runs/resnet18-cifar224
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision

from gradpick.data import decoded_cache
from gradpick.data.folders import image_folder
from gradpick.zoo import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["main"]

MEAN = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)


def _views(images: torch.Tensor, side: int, train: bool) -> torch.Tensor:
    """uint8 [n, 3, 32, 32] to normalised floats at ``side`` px: upsampled to side * 8 / 7 and
    cropped to ``side`` (randomly and flipped when training, centred otherwise)."""
    big = round(side * 256 / 224)
    floats = F.interpolate(images.float() / 255, size=(big, big), mode="bilinear", antialias=True)
    if train:
        top, left = torch.randint(0, big - side + 1, (2,)).tolist()
        floats = floats[:, :, top : top + side, left : left + side]
        if torch.rand(()) < 0.5:
            floats = floats.flip(3)
    else:
        edge = (big - side) // 2
        floats = floats[:, :, edge : edge + side, edge : edge + side]
    return (floats - MEAN) / STD


def _stage(model, images, labels, side, seconds, batch, peak, log) -> int:
    """SGD for ``seconds`` of wall time, the learning rate warming up over the first 5 % of it
    and falling to 0 by a cosine over the rest (a busy machine decides how many steps fit)."""
    optimiser = torch.optim.SGD(
        model.parameters(), lr=peak, momentum=0.9, nesterov=True, weight_decay=5e-4
    )
    model.train()
    started = time.perf_counter()
    step = 0
    while (elapsed := (time.perf_counter() - started) / seconds) < 1:
        warm = min(1.0, elapsed / 0.05)
        for group in optimiser.param_groups:
            group["lr"] = peak * warm * 0.5 * (1 + math.cos(math.pi * elapsed))
        rows = torch.randint(0, len(images), (batch,))
        loss = F.cross_entropy(
            model(_views(images[rows], side, True)), labels[rows], label_smoothing=0.1
        )
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        step += 1
        if step % 10 == 0:
            log(f"{side} px step {step} loss {loss.item():.3f} {time.perf_counter() - started:.0f} s")
    return step


def _accuracy(model, images, labels, side) -> float:
    model.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, len(images), 100):
            chunk = _views(images[start : start + 100], side, False)
            right += int((model(chunk).argmax(1) == labels[start : start + 100]).sum())
    return right / len(images)


def main(out: Path, seconds48: int = 1500, seconds224: int = 360) -> None:
    torch.manual_seed(0)
    root = Path(os.environ["GRADPICK_CIFAR10_DIR"])
    train = decoded_cache(image_folder(root / "train"))
    test = decoded_cache(image_folder(root / "test"))
    held = torch.randperm(len(test), generator=torch.Generator().manual_seed(1))[:300]
    model = torchvision.models.resnet18(num_classes=10)
    out.mkdir(parents=True, exist_ok=True)
    log_file = (out / "log.txt").open("a")

    def log(line: str) -> None:
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    steps48 = _stage(model, train.images, train.labels, 48, seconds48, 128, 0.2, log)
    torch.save(model.state_dict(), out / "weights48.pt")
    accuracy48 = _accuracy(model, test.images[held], test.labels[held], 48)
    log(f"test accuracy at 48 px: {accuracy48:.3f}")
    steps224 = _stage(model, train.images, train.labels, 224, seconds224, 16, 0.01, log)
    torch.save(model.state_dict(), out / "weights.pt")
    accuracy224 = _accuracy(model, test.images[held], test.labels[held], 224)
    log(f"test accuracy at 224 px: {accuracy224:.3f}")
    (out / "card.json").write_text(json.dumps({
        "architecture": "torchvision:resnet18", "steps_48px_batch128": steps48,
        "steps_224px_batch16": steps224, "test_images": len(held),
        "test_accuracy_48px": accuracy48, "test_accuracy_224px": accuracy224,
    }, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(value) for value in sys.argv[2:]))
