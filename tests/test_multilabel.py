"""Multi-label (sigmoid) models: the bce target against autograd, per-label metrics against
scikit-learn, and per-label Grad-CAM maps on 2x2 mosaics of real CIFAR-10 images through the
shipped ResNet-20 taking each class's maximum over the four quadrants."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, precision_score, recall_score
from torch import nn

from gradpick import data, multilabel
from gradpick.errors import InputError
from gradpick.gradients.engine import input_gradients
from gradpick.models import shipped as models
from gradpick.models import zoo


def _float64_net() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    return models.freeze(net).double()


@pytest.mark.parametrize("strategy", ["recompute", "summed", "retain_graph"])
@pytest.mark.parametrize("multi_hot", [True, False], ids=["multi-hot", "one-label"])
def test_the_bce_target_is_autograd_of_the_labels_binary_cross_entropy(
    strategy: str, multi_hot: bool
) -> None:
    model = _float64_net()
    images = torch.rand(4, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    present = torch.tensor([[1, 0, 1, 0, 0], [0, 1, 0, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    single = torch.tensor([2, 4, 0, 3])
    labels = present if multi_hot else single
    picks, classes = [0, 2, 3, 0], [2, 2, 4, 1]
    result = input_gradients(
        model, images, picks, labels=labels, target="bce", classes=classes, strategy=strategy
    )
    for row, (index, label) in enumerate(zip(picks, classes, strict=True)):
        image = images[index : index + 1].clone().requires_grad_(True)
        logit = model(image)[0, label]
        truth = float(present[index, label]) if multi_hot else float(single[index] == label)
        # the formula written out: -t log σ(z) - (1 - t) log(1 - σ(z))
        value = -truth * F.logsigmoid(logit) - (1 - truth) * F.logsigmoid(-logit)
        (expected,) = torch.autograd.grad(value, image)
        assert expected.abs().max() > 0
        torch.testing.assert_close(result.gradients[row], expected[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(result.target_values[row], value.detach())


def test_bce_needs_labels_and_vmap_refuses_it() -> None:
    model = _float64_net()
    images = torch.rand(2, 3, 8, 8, dtype=torch.float64)
    with pytest.raises(InputError, match="target='bce' needs the true labels"):
        input_gradients(model, images, [0], target="bce", classes=[1])
    with pytest.raises(InputError, match="use recompute for bce"):
        input_gradients(model, images, [0], labels=[1, 2], target="bce", strategy="vmap")
    with pytest.raises(InputError, match="Multi-hot labels"):
        input_gradients(model, images, [0], labels=[[1, 2], [0, 1]], target="bce")


def test_per_label_metrics_equal_scikit_learn() -> None:
    generator = torch.Generator().manual_seed(3)
    present = (torch.rand(200, 6, generator=generator) < 0.3).long()
    present[:, 5] = 0  # a label no image has: AP undefined, left out of the mAP
    logits = torch.randn(200, 6, generator=generator, dtype=torch.float64) + 1.5 * present
    logits[:50, 2] = 0.25  # ties
    metrics = multilabel.label_metrics(logits, present)
    scores = torch.sigmoid(logits).numpy()
    predicted = (scores >= 0.5).astype(int)
    for label in range(5):
        truth = present[:, label].numpy()
        assert metrics.precision[label] == pytest.approx(
            precision_score(truth, predicted[:, label])
        )
        assert metrics.recall[label] == pytest.approx(recall_score(truth, predicted[:, label]))
        expected = average_precision_score(truth, scores[:, label])
        assert metrics.average_precision[label] == pytest.approx(expected, abs=1e-12)
    assert metrics.average_precision[5].isnan() and metrics.positives[5] == 0
    assert metrics.mean_ap == pytest.approx(float(metrics.average_precision[:5].mean()))


def test_picking_by_label_and_threshold() -> None:
    logits = torch.tensor([[2.0, -1.0], [-3.0, 0.1], [0.0, 4.0]])
    assert multilabel.pick_by_label(logits, 1).tolist() == [1, 2]
    assert multilabel.pick_by_label(logits, 0, threshold=0.6).tolist() == [0]
    with pytest.raises(InputError, match="out of range"):
        multilabel.pick_by_label(logits, 2)


# ----------------------------------------------------------------------------- the mosaic


class QuadrantMax(nn.Module):
    """ResNet-20 on each 32x32 quadrant of a 64x64 mosaic; a class's score is its largest logit
    over the quadrants. The quadrants' last feature maps are laid side by side (``stitched``,
    [N, 64, 16, 16]) so one layer map covers the mosaic."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.stitched = nn.Identity()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        n, net = images.shape[0], self.net
        quadrants = images.reshape(n, 3, 2, 32, 2, 32).permute(0, 2, 4, 1, 3, 5)
        x = F.relu(net.bn1(net.conv1(net.normalize(quadrants.reshape(n * 4, 3, 32, 32)))))
        features = net.layer3(net.layer2(net.layer1(x)))  # [4n, 64, 8, 8]
        grid = features.reshape(n, 2, 2, 64, 8, 8).permute(0, 3, 1, 4, 2, 5)
        grid = self.stitched(grid.reshape(n, 64, 16, 16))
        back = grid.reshape(n, 64, 2, 8, 2, 8).permute(0, 2, 4, 1, 3, 5).reshape(n * 4, 64, 8, 8)
        return net.fc(back.mean(dim=(2, 3))).reshape(n, 4, -1).amax(dim=1)


def test_each_labels_grad_cam_peaks_in_its_own_quadrant(shared_cifar10_dir: Path) -> None:
    if "resnet20" not in models.shipped_models():
        pytest.skip("no shipped resnet20 weights")
    net = zoo.load_model("resnet20").module
    source = data.open_source(shared_cifar10_dir, "test")
    batch = data.load_batch(source, size=400, seed=5)
    with torch.no_grad():
        right = net(batch.float_images()).argmax(1) == batch.labels
    # 2x2 mosaics of correctly classified images of four different classes
    mosaics, quadrant_classes = [], []
    pool = [i for i in range(len(batch)) if right[i]]
    while len(mosaics) < 40 and len(pool) >= 4:
        chosen: list[int] = []
        for i in list(pool):
            if int(batch.labels[i]) not in [int(batch.labels[j]) for j in chosen]:
                chosen.append(i)
                pool.remove(i)
            if len(chosen) == 4:
                break
        if len(chosen) < 4:
            break
        tiles = batch.float_images()[chosen]
        mosaics.append(torch.cat([torch.cat(list(tiles[:2]), 2), torch.cat(list(tiles[2:]), 2)], 1))
        quadrant_classes.append([int(batch.labels[i]) for i in chosen])
    images = torch.stack(mosaics)
    wrapper = models.freeze(QuadrantMax(copy.deepcopy(net)))
    peaks, total = 0, 0
    for index, classes in enumerate(quadrant_classes):
        result = multilabel.label_maps(wrapper, images, index, classes, layer="stitched")
        assert result.layer_maps is not None and result.layer_maps.shape[-2:] == (16, 16)
        for quadrant, layer_map in enumerate(result.layer_maps):
            row, column = divmod(int(layer_map.flatten().argmax()), 16)
            peaks += (row // 8) * 2 + column // 8 == quadrant
            total += 1
    rate = peaks / total
    print(f"mosaic: {peaks} of {total} labels' Grad-CAM peaks in their own quadrant ({rate:.1%})")
    assert total >= 100 and rate >= 0.95


# ----------------------------------------------------------------------------- the model's kind


def test_output_sigmoid_is_read_from_the_flag_and_refused_when_unknown() -> None:
    assert zoo.load_model("tutorial").output == "softmax"
    loaded = zoo.load_model("tutorial", output="sigmoid")
    assert loaded.output == "sigmoid" and loaded.identity()["output"] == "sigmoid"
    assert "sigmoid" in loaded.describe()
    # its stores hold sigmoid probabilities: never taken for the softmax model's, nor theirs
    assert loaded.store_identity == zoo.load_model("tutorial").store_identity + ":sigmoid"
    with pytest.raises(InputError, match="Unknown output 'tanh'"):
        zoo.load_model("tutorial", output="tanh")


def test_a_hugging_face_multi_label_config_is_a_sigmoid_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8], depths=[1], num_labels=3,
        problem_type="multi_label_classification",
    )  # fmt: skip
    transformers.ResNetForImageClassification(config).save_pretrained(tmp_path)
    transformers.ConvNextImageProcessor(size={"shortest_edge": 32}).save_pretrained(tmp_path)
    assert zoo.load_model(f"hf:{tmp_path}").output == "sigmoid"


def test_compare_refuses_a_sigmoid_model_with_the_reason(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "gradpick", "compare", "--model", "tutorial", "--output",
         "sigmoid", "--model", "tutorial", "--size", "8", "--json", str(tmp_path / "c.json")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode != 0
    assert "independent labels (sigmoid, multi-label)" in finished.stderr
    assert "Traceback" not in finished.stderr


def test_infer_of_a_sigmoid_model_prints_per_label_metrics(generated_folder: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "gradpick", "infer", "--model", "tutorial", "--output", "sigmoid",
         "--data", str(generated_folder), "--size", "20"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    source = data.open_source(generated_folder, "test", zoo.load_model("tutorial").spec)
    with torch.no_grad():
        logits = zoo.load_model("tutorial").module(source.read(range(20)).float() / 255)
    present = F.one_hot(source.labels()[:20], 10)
    expected = multilabel.label_metrics(logits, present).mean_ap
    assert f"mAP: {expected:.4f}" in finished.stdout and "\naccuracy:" not in finished.stdout
    assert "airplane" in finished.stdout and "precision" in finished.stdout
