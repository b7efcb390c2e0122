"""Hugging Face classifiers through ``hf:DIR``: tiny random models built from configs, saved with
their processors, loaded offline, and held to the model's own processor, forward and autograd
and to pytorch-grad-cam with the usual ``.logits`` wrapper and token reshapes."""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from pytorch_grad_cam import GradCAM as PeerGradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from torch import nn

from gradpick.attribution import attribute
from gradpick.attribution.cam import upsampled
from gradpick.errors import ModelError
from gradpick.gradients import layers
from gradpick.gradients.engine import input_gradients
from gradpick.models import hf, zoo

transformers = pytest.importorskip("transformers")

CLASSES = ("cat", "dog", "car", "ship", "frog")
LABELS = {"id2label": dict(enumerate(CLASSES)), "label2id": {n: i for i, n in enumerate(CLASSES)}}
PIXEL_SIZES = [(70, 53), (101, 64), (64, 96), (37, 50), (23, 30)]
"""(width, height) of the non-square test images: downscaled, upscaled, both orientations."""


def _build(family: str) -> tuple[nn.Module, Any]:
    """A tiny random classifier of ``family`` and the processor style it is saved with."""
    t = transformers
    kw: dict[str, Any] = {"num_labels": len(CLASSES), **LABELS}
    if family == "vit":  # ViT's own processor: stretch to exactly H x W
        config = t.ViTConfig(
            image_size=32, patch_size=8, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=32, **kw,
        )  # fmt: skip
        return t.ViTForImageClassification(config), t.ViTImageProcessor(
            size={"height": 32, "width": 32}
        )
    if family == "swin":  # DeiT's processor: stretch to 36 x 36, centre crop 32 x 32, bicubic
        config = t.SwinConfig(
            image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2],
            window_size=2, **kw,
        )  # fmt: skip
        return t.SwinForImageClassification(config), t.DeiTImageProcessor(
            size={"height": 36, "width": 36}, crop_size={"height": 32, "width": 32}
        )
    if family == "convnext":  # ConvNeXt's: shorter side int(32 / crop_pct), centre crop 32
        config = t.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], **kw)
        return t.ConvNextForImageClassification(config), t.ConvNextImageProcessor(
            size={"shortest_edge": 32}, crop_pct=0.875
        )
    # BiT's (ResNet, DINOv2): shorter side 40, centre crop 32, CLIP's mean and std
    config = t.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], **kw)
    return t.ResNetForImageClassification(config), t.BitImageProcessor(
        size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}
    )


FAMILIES = ("vit", "swin", "convnext", "resnet")
LAYERS = {
    "vit": "model.vit.layers.1.layernorm_before",
    "swin": "model.swin.layernorm",
    "convnext": "model.convnext.encoder.stages.1",
    "resnet": "model.resnet.encoder.stages.1",
}
"""The family's automatic layer (pytorch-grad-cam's Hugging Face tutorial uses the same places)."""


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each family saved with its processor into its own folder, seeded."""
    root = tmp_path_factory.mktemp("hf")
    folders = {}
    for family in FAMILIES:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model, processor = _build(family)
        folders[family] = root / family
        model.save_pretrained(folders[family])
        processor.save_pretrained(folders[family])
    return folders


@pytest.fixture(scope="module")
def photos(shared_cifar10_dir: Path) -> list[Image.Image]:
    """Real photos at non-square sizes: 2x3 mosaics of CIFAR-10 test images, cut and scaled."""
    files = sorted((shared_cifar10_dir / "test").glob("*/*.jpg"))[::997][:6]
    mosaic = Image.new("RGB", (96, 64))
    for index, path in enumerate(files):
        mosaic.paste(Image.open(path).convert("RGB"), ((index % 3) * 32, (index // 3) * 32))
    return [
        mosaic.crop((3, 2, 3 + width, 2 + height))
        if width <= 93
        else mosaic.resize((width, height))
        for width, height in PIXEL_SIZES
    ]


def _in_unit_range(loaded: zoo.LoadedModel, standardised: torch.Tensor) -> torch.Tensor:
    """The processor's ``pixel_values`` back in [0, 1] by the served spec's mean and std."""
    assert loaded.spec.mean is not None and loaded.spec.std is not None
    mean = torch.tensor(loaded.spec.mean).view(1, 3, 1, 1)
    std = torch.tensor(loaded.spec.std).view(1, 3, 1, 1)
    return standardised * std + mean


def _worst_difference(
    loaded: zoo.LoadedModel, processor: Any, photos: list[Image.Image], ours: bool
) -> float:
    """The largest |pixel| difference in [0, 1] between ``processor`` and the served spec
    (``ours``) or the same model's PIL processor."""
    pil = transformers.AutoImageProcessor.from_pretrained(processor.name_or_path, backend="pil")
    worst = 0.0
    for photo in photos:
        theirs = processor(images=photo, return_tensors="pt")["pixel_values"]
        if ours:
            other = loaded.spec.prepare(photo)[0].double()[None] / 255.0
        else:
            other = _in_unit_range(loaded, pil(images=photo, return_tensors="pt")["pixel_values"])
        assert theirs.shape[-2:] == other.shape[-2:] == loaded.spec.size
        worst = max(worst, float((_in_unit_range(loaded, theirs.double()) - other).abs().max()))
    return worst


@pytest.mark.parametrize("backend", ["pil", "torchvision"])
@pytest.mark.parametrize("family", FAMILIES)
def test_pixels_are_the_models_own_processors_within_one_level(
    saved: dict[str, Path], photos: list[Image.Image], family: str, backend: str
) -> None:
    """PIL's processors within 1/255; the torchvision ones resample by their own kernels, as
    far from the PIL processor of the same model as from the spec (bicubic: up to 2/255)."""
    loaded = zoo.load_model(f"hf:{saved[family]}")
    processor = transformers.AutoImageProcessor.from_pretrained(saved[family], backend=backend)
    processor.name_or_path = str(saved[family])
    worst = _worst_difference(loaded, processor, photos, ours=True)
    gap = _worst_difference(loaded, processor, photos, ours=False)
    print(
        f"{family} {type(processor).__name__}: worst pixel difference {worst * 255:.3f}/255 "
        f"(its PIL processor: {gap * 255:.3f}/255)"
    )
    assert worst <= max(1 / 255, gap) + 1e-6


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_are_the_models_own_forward(
    saved: dict[str, Path], photos: list[Image.Image], family: str
) -> None:
    loaded = zoo.load_model(f"hf:{saved[family]}")
    own = transformers.AutoModelForImageClassification.from_pretrained(saved[family]).eval()
    processor = transformers.AutoImageProcessor.from_pretrained(saved[family])
    standardised = processor(images=photos, return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        expected = own(pixel_values=standardised).logits
        actual = loaded.module(_in_unit_range(loaded, standardised))
    assert expected.abs().max() > 0
    print(f"{family}: worst logit difference {float((actual - expected).abs().max()):.2e}")
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-5)
    assert loaded.spec.class_names == CLASSES and loaded.classes == len(CLASSES)
    assert loaded.kind == "hf" and loaded.output == "softmax"


@pytest.mark.parametrize("family", FAMILIES)
def test_input_gradients_are_autograd_of_the_models_own_forward_in_float64(
    saved: dict[str, Path], family: str
) -> None:
    loaded = zoo.load_model(f"hf:{saved[family]}")
    served = copy.deepcopy(loaded.module).double()
    own = transformers.AutoModelForImageClassification.from_pretrained(saved[family])
    own = own.double().eval()
    images = torch.rand(3, 3, *loaded.spec.size, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(2))  # fmt: skip
    labels = torch.tensor([1, 4, 2])
    result = input_gradients(served, images, [2, 0], labels=labels)
    # the served wrapper keeps mean and std as float32 buffers, cast to the images' dtype
    mean = torch.tensor(loaded.spec.mean).double().view(1, 3, 1, 1)
    std = torch.tensor(loaded.spec.std).double().view(1, 3, 1, 1)
    for row, index in enumerate([2, 0]):
        image = images[index : index + 1].clone().requires_grad_(True)
        logits = own(pixel_values=(image - mean) / std).logits
        loss = F.cross_entropy(logits, labels[index : index + 1])
        (expected,) = torch.autograd.grad(loss, image)
        assert expected.abs().max() > 0
        torch.testing.assert_close(result.gradients[row], expected[0], rtol=1e-12, atol=1e-12)


class _Logits(nn.Module):
    """The wrapper every pytorch-grad-cam user writes for a transformers model."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values).logits


def _reshape(family: str, grid: tuple[int, int]) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """pytorch-grad-cam's tutorial reshapes: ViT drops the class token, Swin's tokens are a grid."""
    if family not in ("vit", "swin"):
        return None
    drop = 1 if family == "vit" else 0

    def reshape(tensor: torch.Tensor) -> torch.Tensor:
        tokens = tensor[:, drop:, :]
        return tokens.reshape(tensor.shape[0], *grid, tensor.shape[2]).permute(0, 3, 1, 2)

    return reshape


def _min_max(maps: torch.Tensor) -> torch.Tensor:
    """pytorch-grad-cam's per-image scaling: (m - min) / (1e-7 + max - min)."""
    low = maps.amin(dim=(1, 2), keepdim=True)
    shifted = maps - low
    return shifted / (1e-7 + shifted.amax(dim=(1, 2), keepdim=True))


@pytest.mark.parametrize("family", FAMILIES)
def test_grad_cam_at_the_familys_layer_equals_pytorch_grad_cam(
    saved: dict[str, Path], photos: list[Image.Image], family: str
) -> None:
    loaded = zoo.load_model(f"hf:{saved[family]}")
    pixels = torch.stack([loaded.spec.prepare(photo)[0] for photo in photos]).float() / 255.0
    result = attribute(loaded.module, pixels, [0, 1, 2, 3], target="logit", method="gradcam")
    assert result.layer == LAYERS[family]
    assert result.layer_maps is not None
    grid = tuple(result.layer_maps.shape[-2:])
    own = transformers.AutoModelForImageClassification.from_pretrained(saved[family]).eval()
    layer = own.get_submodule(LAYERS[family].removeprefix("model."))
    assert loaded.spec.mean is not None and loaded.spec.std is not None
    mean = torch.tensor(loaded.spec.mean).view(1, 3, 1, 1)
    std = torch.tensor(loaded.spec.std).view(1, 3, 1, 1)
    standardised = ((pixels[:4] - mean) / std).requires_grad_(True)
    targets = [ClassifierOutputTarget(int(c)) for c in result.gradients.classes]
    with PeerGradCAM(
        model=_Logits(own), target_layers=[layer], reshape_transform=_reshape(family, grid)
    ) as peer:
        expected = peer(input_tensor=standardised, targets=targets)
    ours = _min_max(upsampled(_min_max(result.layer_maps), loaded.spec.size)).numpy()
    pearson = [
        float(np.corrcoef(a.ravel(), b.ravel())[0, 1]) for a, b in zip(ours, expected, strict=True)
    ]
    print(f"{family}: Grad-CAM Pearson with pytorch-grad-cam {min(pearson):.9f}")
    assert min(pearson) >= 0.9999


@pytest.mark.parametrize("family", FAMILIES)
def test_the_automatic_layer_is_the_familys(saved: dict[str, Path], family: str) -> None:
    loaded = zoo.load_model(f"hf:{saved[family]}")
    images = torch.zeros(1, 3, *loaded.spec.size)
    chosen = layers.resolve(loaded.module, None, images)
    assert chosen.name == LAYERS[family]
    assert chosen.layout.kind == ("tokens" if family in ("vit", "swin") else "nchw")
    assert chosen.layout.prefix == (1 if family == "vit" else 0)


def test_the_spec_is_each_processors_recipe(saved: dict[str, Path]) -> None:
    specs = {family: zoo.load_model(f"hf:{saved[family]}").spec for family in FAMILIES}
    assert (specs["vit"].resize_mode, specs["vit"].resize, specs["vit"].interpolation) == (
        "warp", None, "bilinear",
    )  # fmt: skip
    assert (specs["swin"].resize_mode, specs["swin"].resize) == ("warp", 36)
    assert (specs["convnext"].resize_mode, specs["convnext"].resize) == ("crop", int(32 / 0.875))
    assert (specs["resnet"].resize_mode, specs["resnet"].resize) == ("crop", 40)
    assert specs["resnet"].interpolation == "bicubic"
    # rescale 1/255 and mean/std fold into one standardisation of pixels in [0, 1]
    assert specs["vit"].mean == (0.5, 0.5, 0.5) and specs["vit"].std == (0.5, 0.5, 0.5)


def test_a_processor_without_rescale_folds_its_scale_into_the_standardisation(
    tmp_path: Path,
) -> None:
    processor = transformers.ViTImageProcessor(
        size={"height": 32, "width": 32}, do_rescale=False, image_mean=[100.0] * 3,
        image_std=[50.0] * 3,
    )  # fmt: skip
    spec = hf.spec_of(processor, ())
    assert spec.mean == pytest.approx((100 / 255,) * 3) and spec.std == pytest.approx(
        (50 / 255,) * 3
    )


# ----------------------------------------------------------------------------- where models are


def _hub_cache(root: Path, repository: str, folder: Path) -> str:
    """``folder`` laid out as the Hugging Face cache keeps a download: refs and a snapshot."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    base = root / f"models--{repository.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    snapshot = base / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for file in folder.iterdir():
        (snapshot / file.name).write_bytes(file.read_bytes())
    return commit


def test_a_hub_name_is_read_from_the_cache_offline(
    saved: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = _hub_cache(tmp_path, "someone/tiny-vit", saved["vit"])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    loaded = zoo.load_model("hf:someone/tiny-vit")
    assert loaded.weights == f"someone/tiny-vit@{commit}"
    assert loaded.weights_sha256 == zoo.load_model(f"hf:{saved['vit']}").weights_sha256
    assert loaded.spec == zoo.load_model(f"hf:{saved['vit']}").spec


def test_a_name_in_neither_place_names_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelError) as raised:
        zoo.load_model("hf:someone/not-downloaded")
    message = str(raised.value)
    assert (
        "save_pretrained" in message
        and "huggingface-cli download someone/not-downloaded" in message
    )
    assert "HF_HUB_OFFLINE" in message


def test_a_folder_without_a_processor_says_how_to_save_one(
    saved: dict[str, Path], tmp_path: Path
) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((saved["vit"] / name).read_bytes())
    with pytest.raises(ModelError, match="processor.save_pretrained"):
        zoo.load_model(f"hf:{bare}")


def test_without_transformers_the_message_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, saved: dict[str, Path]
) -> None:
    real = importlib.import_module

    def missing(name: str, *args: Any) -> Any:
        if name == "transformers":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ModelError, match=r"pip install 'gradpick\[hf\]'"):
        zoo.load_model(f"hf:{saved['vit']}")


def test_a_weights_file_for_an_hf_model_is_refused(saved: dict[str, Path]) -> None:
    with pytest.raises(Exception, match="its own folder"):
        zoo.load_model(f"hf:{saved['vit']}", saved["vit"] / "model.safetensors")


def test_the_served_model_is_frozen_and_its_own_unchanged(saved: dict[str, Path]) -> None:
    loaded = zoo.load_model(f"hf:{saved['vit']}")
    assert not any(p.requires_grad for p in loaded.module.parameters())
    assert not any(m.training for m in loaded.module.modules())
    images = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    before = {k: v.clone() for k, v in loaded.module.state_dict().items()}
    attribute(loaded.module, images, [0, 1], target="logit", method="gradcam")
    after = loaded.module.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    hooks: Iterator[nn.Module] = loaded.module.modules()
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in hooks)


def test_hf_offline_is_read_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert not hf._offline()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hf._offline() and os.environ["HF_HUB_OFFLINE"] == "1"


def test_the_commands_take_an_hf_folder_offline(
    tmp_path: Path, generated_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """infer, grads, check, report and compare with --model hf:DIR, HF_HUB_OFFLINE=1 in the
    commands' own environment; a 10-label ViT so CIFAR-10's labels are its classes."""
    from gradpick.data import CIFAR10_CLASSES

    config = transformers.ViTConfig(
        image_size=(40, 48), patch_size=8, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, num_labels=10,
        id2label=dict(enumerate(CIFAR10_CLASSES)),
    )  # fmt: skip
    folder = tmp_path / "vit10"
    transformers.ViTForImageClassification(config).save_pretrained(folder)
    transformers.ViTImageProcessor(size={"height": 40, "width": 48}).save_pretrained(folder)
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    common = ["--model", f"hf:{folder}", "--data", str(generated_folder), "--size", "6"]
    commands = [
        ["infer", *common, "--out", str(tmp_path / "store")],
        ["grads", *common, "--indices", "1,2", "--method", "gradcam", "--out",
         str(tmp_path / "g.npz")],
        ["check", *common, "--indices", "1", "--method", "gradient", "--json",
         str(tmp_path / "c.json")],
        ["report", *common, "--indices", "0,1", "--out", str(tmp_path / "r.html")],
        ["compare", "--model", f"hf:{folder}", *common, "--indices", "1", "--json",
         str(tmp_path / "compare.json")],
    ]  # fmt: skip
    # One process runs the commands in turn (each as `gradpick ...` would), so torch and
    # transformers are imported once; it stops at the first that fails and says which.
    driver = (
        "import json, sys\nfrom gradpick.cli import main\n"
        "for command in json.loads(sys.argv[1]):\n"
        "    if main(command):\n        sys.exit(f'gradpick {command[0]} failed')\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", driver, json.dumps(commands)],
        capture_output=True, text=True, timeout=600, env=environment,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-2000:]
    compared = json.loads((tmp_path / "compare.json").read_text())
    assert [model["identity"]["kind"] for model in compared["models"]] == ["hf", "hf"]
    # The same model twice: no image flips, and its map agrees with itself.
    assert compared["flips"]["first_only_right"] == compared["flips"]["second_only_right"] == 0
    assert compared["maps"]["rows"][0]["spearman"] == pytest.approx(1.0)
    described = json.loads((tmp_path / "g.json").read_text())
    assert described["model"]["kind"] == "hf"
    assert described["model"]["input_spec"]["resize_mode"] == "warp"
    assert described["model"]["input_spec"]["size"] == [40, 48]
