"""A torchvision ResNet-18 at 224 px whose classifier is fitted on CIFAR-10 (no ImageNet weights
offline): the badge calibration's known-good 224-px model.

Without internet there are no ImageNet weights, and a from-scratch training did not fit on the
shared two-core machine (about 13 s per 128-image step at 48 px under a load of 14). So this
is a linear probe: the convolutional layers keep ``torchvision:resnet18``'s seeded random init
(what ``load_model`` builds), and the last layer (``fc``) is fitted by L-BFGS on the pooled
features of CIFAR-10 training images, read at the model's input spec (upsampled to 256,
cropped to 224). Its maps are a trained model's in the part the badges' checks randomise first
(the classifier), not in the features. The weights are the bare torchvision module's.

    GRADPICK_CIFAR10_DIR=... python tools/train_resnet18_cifar224.py runs/resnet18-cifar224 2000
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gradpick.data import load_batch
from gradpick.data.folders import image_folder
from gradpick.gradients.layers import user_model
from gradpick.models.zoo import load_model
from gradpick.outputs.inference import as_model_input

__all__ = ["main"]


def _features(loaded, root: Path, split: str, count: int, seed: int):
    """Pooled features [n, 512] (the input of fc) and labels of a seeded sample of ``split``."""
    source = image_folder(root / split, loaded.spec)
    batch = load_batch(source, size=count, seed=seed)
    inner, _ = user_model(loaded.module)
    found: list[torch.Tensor] = []
    hook = inner.fc.register_forward_pre_hook(lambda _m, inputs: found.append(inputs[0]))
    try:
        with torch.no_grad():
            for start in range(0, len(batch), 50):
                loaded.module(as_model_input(batch.images[start : start + 50]))
    finally:
        hook.remove()
    return torch.cat(found).double(), batch.labels


def main(out: Path, count: int = 2000) -> None:
    started = time.perf_counter()
    root = Path(os.environ["GRADPICK_CIFAR10_DIR"])
    loaded = load_model("torchvision:resnet18", class_names=[str(i) for i in range(10)])
    train, train_labels = _features(loaded, root, "train", count, 0)
    test, test_labels = _features(loaded, root, "test", 500, 1)
    mean, std = train.mean(0), train.std(0).clamp_min(1e-6)
    weight = torch.zeros(10, train.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(10, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([weight, bias], max_iter=500, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimiser.zero_grad()
        value = F.cross_entropy((train - mean) / std @ weight.T + bias, train_labels)
        value = value + 1e-3 * weight.square().sum()
        value.backward()
        return value

    optimiser.step(loss)
    with torch.no_grad():
        # fold the standardisation into the layer: fc(f) = W (f - mean) / std + b
        folded = weight / std
        shift = bias - folded @ mean
        accuracy = {
            name: float(((features @ folded.T + shift).argmax(1) == labels).double().mean())
            for name, features, labels in (
                ("train", train, train_labels),
                ("test", test, test_labels),
            )
        }
    inner, _ = user_model(loaded.module)
    state = {key: value.clone() for key, value in inner.state_dict().items()}
    state["fc.weight"] = folded.float()
    state["fc.bias"] = shift.float()
    out.mkdir(parents=True, exist_ok=True)
    torch.save(state, out / "weights.pt")
    card = {
        "architecture": "torchvision:resnet18 (seeded random init) + fitted fc",
        "train_images": count,
        "test_images": 500,
        "accuracy": accuracy,
        "seconds": round(time.perf_counter() - started),
    }
    (out / "card.json").write_text(json.dumps(card, indent=2))
    print(json.dumps(card, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(value) for value in sys.argv[2:]))
