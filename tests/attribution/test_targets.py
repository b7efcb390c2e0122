"""The default target: the predicted class's logit for layer methods, the loss for the others,
decided by one rule (``attribution.default_target``) in the library, the CLI, the explorer and
the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM as PeerGradCAM
from torch import nn

from gradpick import attribution, data
from gradpick.attribution import LAYER_METHODS, METHOD_NAMES, attribute, default_target
from gradpick.cli import main
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.ui.heatmaps import resolved_mode


class _AgainstTheLoss(nn.Module):
    """conv 1x1 (identity) -> ReLU -> mean -> z = (s, -s): positive images are class 0 with
    confidence, and every feature lowers the loss, so Grad-CAM of the loss keeps nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1, bias=False)
        self.head = nn.Linear(3, 2, bias=False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.eye(3).reshape(3, 3, 1, 1))
            self.head.weight.copy_(torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]]))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(images)).mean(dim=(2, 3)))


def _positive_images(count: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return 0.2 + torch.rand(count, 3, 8, 8, generator=generator)


def test_every_layer_method_defaults_to_the_logit_and_every_other_to_the_loss() -> None:
    for name in METHOD_NAMES:
        assert default_target(name) == ("logit" if name in LAYER_METHODS else "loss")
        assert default_target(name, labelled=False) == "logit"
        assert default_target(name, class_given=True) == "logit"


def test_default_grad_cam_equals_pytorch_grad_cam_of_the_predicted_class() -> None:
    model = _AgainstTheLoss().eval()
    images = _positive_images()
    labels = torch.zeros(3, dtype=torch.long)  # correct: every image is class 0
    result = attribute(model, images, [0, 1, 2], labels=labels, method="gradcam")
    assert result.gradients.target == "logit"
    assert result.gradients.classes.tolist() == [0, 0, 0]
    pixels = images.clone().requires_grad_(True)
    with PeerGradCAM(model=model, target_layers=[model.conv]) as peer:
        expected = peer(input_tensor=pixels, targets=None)  # None: the predicted class
    ours = result.layer_maps
    low = ours.amin(dim=(1, 2), keepdim=True)
    scaled = (ours - low) / (1e-7 + (ours - low).amax(dim=(1, 2), keepdim=True))
    np.testing.assert_allclose(scaled.numpy(), expected, rtol=0, atol=1e-4)
    assert bool((ours.flatten(1).amax(dim=1) > 0).all())
    # The loss, asked for, is still there: and it leaves these maps all zero.
    lossy = attribute(model, images, [0, 1, 2], labels=labels, method="gradcam", target="loss")
    assert lossy.gradients.target == "loss" and not bool(lossy.layer_maps.any())


def test_input_gradient_methods_keep_the_loss_by_default() -> None:
    model = _AgainstTheLoss().eval()
    images = _positive_images()
    labels = torch.zeros(3, dtype=torch.long)
    result = attribute(model, images, [0, 2], labels=labels, method="gradient")
    assert result.gradients.target == "loss"
    explicit = attribute(model, images, [0, 2], labels=labels, target="loss")
    torch.testing.assert_close(result.maps, explicit.maps, rtol=0, atol=0)
    # Without labels there is no loss: the predicted class's logit, not an error.
    unlabelled = attribute(model, images, [0, 2], method="gradient")
    assert unlabelled.gradients.target == "logit"


def test_the_explorer_resolves_its_default_target_by_the_same_rule() -> None:
    assert resolved_mode("auto", "gradcam", labelled=True) == "predicted"
    assert resolved_mode("auto", "gradient", labelled=True) == "loss"
    assert resolved_mode("auto", "gradient", labelled=False) == "predicted"
    assert resolved_mode("class", "gradcam", labelled=True) == "class"


@pytest.fixture
def fitting(image_folder_factory) -> Path:
    return image_folder_factory(classes=10, per_class=2, name="fitting")


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        state = models.build("tutorial").state_dict()
    path = tmp_path / "tutorial.pt"
    torch.save(state, path)
    return path


@pytest.mark.parametrize(("method", "expected"), [("gradcam", "logit"), ("gradient", "loss")])
def test_gradpick_grads_with_every_default_explains_the_methods_default(
    fitting: Path, weights: Path, tmp_path: Path, method: str, expected: str
) -> None:
    out = tmp_path / "maps.pt"
    status = main(
        ["grads", "--data", str(fitting), "--model", "tutorial", "--weights", str(weights)]
        + ["--method", method, "--indices", "0,5", "--out", str(out)]
    )
    assert status == 0
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["target"] == expected
    if expected == "logit":  # each image's own predicted class, by the model computed here
        batch = data.load_batch(data.image_folder(fitting))
        model = models.load("tutorial", weights)
        with torch.no_grad():
            predicted = model(batch.float_images()[[0, 5]]).argmax(dim=1)
        assert sidecar["classes"] == predicted.tolist()


def test_default_grad_cam_of_64_cifar10_test_images_has_no_all_zero_map(
    shared_cifar10_dir: Path,
) -> None:
    source = data.image_folder(shared_cifar10_dir / "test")
    batch = data.load_batch(source, size=64, seed=0)
    loaded = zoo.load_model("resnet20")
    images = batch.float_images()
    result = attribution.attribute(
        loaded.module, images, list(range(64)), labels=batch.labels, method="gradcam"
    )
    peaks = result.layer_maps.flatten(1).amax(dim=1)
    empty = [index for index, peak in enumerate(peaks.tolist()) if peak <= 0]
    assert empty == [], f"all-zero default Grad-CAM maps of images {empty}"
