"""Any classifier by name: torchvision, timm and factory models with their input specs.

Nothing is downloaded: torchvision weights enums are served from a generated file placed in a
temporary ``$TORCH_HOME``, downloads go to local stand-ins, timm models are never pretrained.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from safetensors.torch import save_file
from torch import nn

from gradpick.cli import main
from gradpick.data import CIFAR10_CLASSES
from gradpick.errors import InputError, ModelError
from gradpick.gradients.engine import STRATEGIES, input_gradients
from gradpick.models import shipped as models
from gradpick.models import weights as weights_io
from gradpick.models import zoo
from gradpick.models.spec import InputSpec
from tests.gradients.test_engine import assert_exact, assert_float32_close, per_sample_reference

TINY_TORCHVISION = "squeezenet1_1"
"""The smallest torchvision classifier with a weights enum (1.2 M parameters)."""
TINY_TIMM = "test_resnet"


def seeded(build, seed: int = 3):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


# ----------------------------------------------------------------------------- exactness


@pytest.fixture(scope="module", params=[64, 224], ids=["64px", "224px"])
def resnet18_case(request: pytest.FixtureRequest):
    """torchvision's ResNet-18 (random weights) at ``size``, float64, with its reference."""
    size = request.param
    loaded = zoo.load_model("torchvision:resnet18", input_size=size, device="cpu")
    assert loaded.spec.size == (size, size) and loaded.classes == 1000
    model = copy.deepcopy(loaded.module).double()
    generator = torch.Generator().manual_seed(size)
    images = torch.rand(3, 3, size, size, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 1000, (3,), generator=generator)
    indices = [2, 0]
    expected, values, _ = per_sample_reference(model, images, indices, labels, "loss")
    return model, images, labels, indices, expected, values


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_equals_per_sample_autograd_for_torchvision_resnet18(
    resnet18_case, strategy: str
) -> None:
    model, images, labels, indices, expected, values = resnet18_case
    result = input_gradients(model, images, indices, labels=labels, strategy=strategy)
    assert result.gradients.shape == (2, 3, *images.shape[-2:])
    assert_exact(result.gradients, expected)
    torch.testing.assert_close(result.target_values, values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_is_per_sample_autograd_within_rounding_in_float32(strategy: str) -> None:
    model = zoo.load_model("torchvision:resnet18", input_size="48x64").module
    images = torch.rand(3, 3, 48, 64, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([5, 500, 999])
    expected, _, _ = per_sample_reference(model, images, [1, 2], labels, "loss")
    result = input_gradients(model, images, [1, 2], labels=labels, strategy=strategy)
    assert result.gradients.dtype == torch.float32
    assert_float32_close(result.gradients, expected)


def test_without_a_weights_enum_the_models_own_recipe_sizes_it() -> None:
    recipe = torchvision.models.get_model_weights("efficientnet_b0").IMAGENET1K_V1.transforms()
    loaded = zoo.load_model("torchvision:efficientnet_b0")
    assert loaded.spec.size == (recipe.crop_size[0],) * 2 and loaded.spec.resize == 256
    assert loaded.spec.interpolation == recipe.interpolation.value == "bicubic"
    assert loaded.spec.class_names == ()  # random weights: their outputs name nothing yet


def test_the_normalising_wrapper_is_the_explicit_formula_with_pixel_gradients() -> None:
    inner = seeded(lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 5)))
    inner = weights_io.freeze(inner).double()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    wrapped = zoo.Normalized(inner, mean, std)
    images = torch.rand(2, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    # the wrapper keeps its constants as float32 buffers, cast to the images' dtype
    as_buffer = lambda values: torch.tensor(values).double().view(1, 3, 1, 1)  # noqa: E731
    explicit = inner((images - as_buffer(mean)) / as_buffer(std))
    (expected,) = torch.autograd.grad(explicit.square().sum(), images)
    (actual,) = torch.autograd.grad(wrapped(images).square().sum(), images)
    assert torch.equal(actual, expected)
    assert not torch.equal(actual, torch.autograd.grad(inner(images).square().sum(), images)[0])
    assert "normalize.mean" not in wrapped.state_dict()


def test_served_models_are_frozen_and_normalise_inside() -> None:
    loaded = zoo.load_model("torchvision:resnet18", input_size=32)
    assert isinstance(loaded.module, zoo.Normalized) and not loaded.module.training
    assert not any(parameter.requires_grad for parameter in loaded.module.parameters())
    assert loaded.weights is None and "random weights" in loaded.describe()
    identity = loaded.identity()
    assert identity["kind"] == "torchvision" and identity["input_spec"]["size"] == [32, 32]
    json.dumps(identity)


def test_built_ins_keep_32_pixels_their_cards_and_inner_normalisation() -> None:
    if "resnet20" not in models.shipped_models():
        pytest.skip("no shipped resnet20 weights")
    loaded = zoo.load_model("resnet20")
    assert loaded.spec.size == (32, 32) and loaded.spec.mean is None
    assert isinstance(loaded.module, models.ResNet20) and loaded.classes == 10
    assert loaded.card is not None and loaded.weights_sha256 == loaded.card.get("sha256")
    assert "test accuracy" in loaded.describe()
    with pytest.raises(InputError, match="standardises its input itself"):
        zoo.load_model("resnet20", mean=(0.5, 0.5, 0.5), std=(0.2, 0.2, 0.2))


def test_a_built_in_stand_in_has_seed_0_weights_even_when_weights_ship(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explorer's stand-in for an untrained built-in: the same network every run (seed 0),
    named by its seed, never the shipped file; without ``stand_in`` an unshipped one is
    refused, as the command line needs."""
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path))
    with pytest.raises(ModelError, match="No shipped weights for 'tutorial'"):
        zoo.load_model("tutorial")
    torch.save(seeded(lambda: models.build("tutorial")).state_dict(), tmp_path / "tutorial.pt")
    loaded = zoo.load_model("tutorial", stand_in=True)
    reference = seeded(lambda: models.build("tutorial"), seed=0).state_dict()
    for key, value in loaded.module.state_dict().items():
        assert torch.equal(value, reference[key]), key
    assert not loaded.module.training and loaded.classes == 10
    assert not any(parameter.requires_grad for parameter in loaded.module.parameters())
    assert loaded.spec == InputSpec(size=(32, 32), class_names=CIFAR10_CLASSES)
    assert loaded.weights is None and loaded.weights_sha256 is None and loaded.card is None
    assert loaded.store_identity.startswith("tutorial:random-seed0:")
    assert "random weights, seed 0, untrained" in loaded.describe()
    with pytest.raises(InputError, match="tutorial standardises its input itself"):
        zoo.load_model("tutorial", stand_in=True, mean=(0.5,) * 3, std=(0.5,) * 3)
    with pytest.raises(InputError, match="stand-in"):
        zoo.load_model("tutorial", tmp_path / "tutorial.pt", stand_in=True)
    with pytest.raises(InputError, match="stand-in"):
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}", stand_in=True)


def test_a_built_in_from_uploaded_bytes_is_named_upload_by_their_digest(tmp_path: Path) -> None:
    import hashlib

    state = seeded(lambda: models.build("tutorial")).state_dict()
    path = tmp_path / "tutorial.pt"
    torch.save(state, path)
    data = path.read_bytes()
    loaded = zoo.load_model("tutorial", data)
    assert (loaded.weights, loaded.weights_sha256) == ("upload", hashlib.sha256(data).hexdigest())
    assert all(torch.equal(value, state[key]) for key, value in loaded.module.state_dict().items())
    with pytest.raises(InputError, match="tutorial standardises its input itself"):
        zoo.load_model("tutorial", data, mean=(0.5,) * 3, std=(0.5,) * 3)


# ----------------------------------------------------------------------------- weights enums


def tiny_weights_enum():
    return torchvision.models.get_model_weights(TINY_TORCHVISION).IMAGENET1K_V1


def write_state(path: Path, seed: int = 5) -> Path:
    state = seeded(lambda: torchvision.models.get_model(TINY_TORCHVISION), seed).state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return path


@pytest.fixture
def torch_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "torch-home"
    monkeypatch.setenv("TORCH_HOME", str(home))
    return home


def test_a_weights_enum_is_read_from_the_hub_cache_with_its_own_spec(torch_home: Path) -> None:
    enum = tiny_weights_enum()
    cached = write_state(torch_home / "hub" / "checkpoints" / Path(enum.url).name)

    loaded = zoo.load_model(f"torchvision:{TINY_TORCHVISION}:IMAGENET1K_V1")

    assert loaded.weights == str(cached)
    assert loaded.weights_sha256 == weights_io.sha256_file(cached)
    transform = enum.transforms()
    assert loaded.spec.size == (transform.crop_size[0], transform.crop_size[0]) == (224, 224)
    assert loaded.spec.resize == transform.resize_size[0] == 256
    assert loaded.spec.mean == tuple(transform.mean) and loaded.spec.std == tuple(transform.std)
    assert loaded.spec.class_names == tuple(enum.meta["categories"]) and loaded.classes == 1000
    assert "IMAGENET1K_V1 from the torch hub cache" in loaded.describe()
    reference = torchvision.models.get_model(TINY_TORCHVISION)
    reference.load_state_dict(torch.load(cached, weights_only=True))
    reference = zoo.Normalized(weights_io.freeze(reference), transform.mean, transform.std)
    images = torch.rand(2, 3, 224, 224)
    torch.testing.assert_close(loaded.module(images), reference(images), rtol=0, atol=0)


def test_weights_enums_build_the_network_as_torchvision_does(torch_home: Path) -> None:
    enum = torchvision.models.get_model_weights("googlenet").IMAGENET1K_V1
    network = seeded(lambda: torchvision.models.googlenet(aux_logits=True, init_weights=False))
    path = torch_home / "hub" / "checkpoints" / Path(enum.url).name
    path.parent.mkdir(parents=True)
    torch.save(network.state_dict(), path)

    loaded = zoo.load_model("torchvision:googlenet:IMAGENET1K_V1")

    inner = loaded.module.model
    assert inner.transform_input, "its published weights expect the input re-standardised"
    network.transform_input = True
    images = torch.rand(1, 3, 224, 224)
    served = weights_io.freeze(network)
    expected = zoo.Normalized(served, zoo.IMAGENET_MEAN, zoo.IMAGENET_STD)(images)
    torch.testing.assert_close(loaded.module(images), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("architecture", "weights", "options"),
    [
        # torchvision's builders set these before loading the file (its model docs: GoogLeNet
        # and Inception v3 re-standardise inside; the SWAG end-to-end ViTs run at 384 and
        # 518 pixels; MaxViT is built for its 224-pixel input)
        ("googlenet", "IMAGENET1K_V1", {"transform_input": True, "aux_logits": True}),
        ("inception_v3", "IMAGENET1K_V1", {"transform_input": True, "aux_logits": True}),
        ("vit_b_16", "IMAGENET1K_SWAG_E2E_V1", {"image_size": 384}),
        ("vit_h_14", "IMAGENET1K_SWAG_E2E_V1", {"image_size": 518}),
        ("vit_b_32", "IMAGENET1K_V1", {"image_size": 224}),
        ("maxvit_t", "IMAGENET1K_V1", {"input_size": (224, 224)}),
        ("resnet18", "IMAGENET1K_V1", {}),
    ],
)
def test_each_weights_enum_gets_the_build_options_torchvision_gives_it(
    architecture: str, weights: str, options: dict[str, object]
) -> None:
    enum = torchvision.models.get_model_weights(architecture)[weights]
    if "aux_logits" in options:
        options = {**options, "init_weights": False}  # the file replaces every weight anyway
    assert zoo._enum_build_options(architecture, enum) == options


def test_densenet_weights_in_the_hub_cache_load_under_their_published_names(
    torch_home: Path,
) -> None:
    enum = torchvision.models.get_model_weights("densenet121").IMAGENET1K_V1
    state = seeded(lambda: torchvision.models.get_model("densenet121")).state_dict()
    path = torch_home / "hub" / "checkpoints" / Path(enum.url).name
    path.parent.mkdir(parents=True)
    torch.save(as_published(state), path)
    loaded = zoo.load_model("torchvision:densenet121:IMAGENET1K_V1")
    inner = loaded.module.model
    assert all(torch.equal(value, state[key]) for key, value in inner.state_dict().items())


def test_weights_for_another_torchvision_network_are_refused_by_its_name(
    torch_home: Path, tmp_path: Path
) -> None:
    other = seeded(lambda: torchvision.models.get_model("squeezenet1_0")).state_dict()
    given = tmp_path / "other.pth"
    torch.save(other, given)
    cached = torch_home / "hub" / "checkpoints" / Path(tiny_weights_enum().url).name
    cached.parent.mkdir(parents=True)
    torch.save(other, cached)
    refusal = rf"^These weights are not for the 'torchvision:{TINY_TORCHVISION}' architecture"
    with pytest.raises(ModelError, match=refusal):
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}", given)
    with pytest.raises(ModelError, match=refusal):
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}:IMAGENET1K_V1")


def test_an_architecture_without_weights_enums_gets_the_usual_imagenet_recipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import enum

    class NoWeights(enum.Enum):
        pass

    monkeypatch.setattr(torchvision.models, "get_model_weights", lambda name: NoWeights)
    loaded = zoo.load_model(f"torchvision:{TINY_TORCHVISION}")
    assert loaded.spec == InputSpec(
        size=(224, 224), resize=256, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)
    )


def test_a_weights_recipe_with_a_filter_pil_lacks_is_read_bilinear(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import functools

    from torchvision.transforms import InterpolationMode
    from torchvision.transforms._presets import ImageClassification

    enum = tiny_weights_enum()
    lanczos = functools.partial(
        ImageClassification, crop_size=200, resize_size=230, interpolation=InterpolationMode.LANCZOS
    )
    monkeypatch.setattr(enum.value, "transforms", lanczos)
    loaded = zoo.load_model(f"torchvision:{TINY_TORCHVISION}")
    assert (loaded.spec.size, loaded.spec.resize) == ((200, 200), 230)
    assert loaded.spec.interpolation == "bilinear"


def closed_port_url(name: str) -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/{name}"


@pytest.mark.parametrize("where", ["closed port", "missing file"])
def test_an_absent_file_that_cannot_be_downloaded_says_where_to_put_it(
    torch_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    enum = tiny_weights_enum()
    name = Path(enum.url).name
    url = closed_port_url(name) if where == "closed port" else (tmp_path / "none" / name).as_uri()
    monkeypatch.setattr(enum.value, "url", url)
    checkpoints = torch_home / "hub" / "checkpoints"

    with pytest.raises(ModelError) as error:
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}:IMAGENET1K_V1")

    message = str(error.value)
    assert "Could not download" in message and name in message and str(checkpoints) in message
    assert message.endswith(
        f"copy the file {name} into {checkpoints} (the torch hub cache, "
        "$TORCH_HOME/hub/checkpoints) and try again."
    )
    if where == "closed port":  # the socket's own reason, not urllib's wrapper around it
        assert "([Errno 111] Connection refused)" in message
    assert not list(checkpoints.glob("*")), "a failed download must leave nothing behind"


def test_a_missing_file_is_downloaded_into_the_hub_cache_and_hash_checked(
    torch_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    enum = tiny_weights_enum()
    served = write_state(tmp_path / "server" / "generated.pth")
    digest = weights_io.sha256_file(served)
    good = served.rename(served.with_name(f"{TINY_TORCHVISION}-{digest[:8]}.pth"))
    monkeypatch.setattr(enum.value, "url", good.as_uri())

    loaded = zoo.load_model(f"torchvision:{TINY_TORCHVISION}:IMAGENET1K_V1")

    cached = torch_home / "hub" / "checkpoints" / good.name
    assert loaded.weights == str(cached) and loaded.weights_sha256 == digest

    plain = torch_home / "plain" / f"{TINY_TORCHVISION}.pth"  # no hash in its name: none checked
    plain.parent.mkdir()
    plain.write_bytes(good.read_bytes())
    monkeypatch.setattr(enum.value, "url", plain.as_uri())
    unhashed = zoo.load_model(f"torchvision:{TINY_TORCHVISION}:IMAGENET1K_V1")
    assert unhashed.weights == str(cached.with_name(plain.name))

    wrong = good.rename(good.with_name(f"{TINY_TORCHVISION}-00000000.pth"))
    monkeypatch.setattr(enum.value, "url", wrong.as_uri())
    with pytest.raises(ModelError, match="Could not download.*hash"):
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}:IMAGENET1K_V1")
    assert not (cached.parent / wrong.name).exists()


def test_unknown_weights_and_a_second_weights_file_are_explained(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as unknown:
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}:IMAGENET9K")
    assert str(unknown.value) == (
        f"{TINY_TORCHVISION} has no weights 'IMAGENET9K'; choose one of DEFAULT, IMAGENET1K_V1."
    )
    with pytest.raises(InputError, match="names its weights already"):
        zoo.load_model(
            f"torchvision:{TINY_TORCHVISION}:IMAGENET1K_V1", write_state(tmp_path / "w.pt")
        )


# ----------------------------------------------------------------------------- weights files


def test_a_torchvision_weights_file_is_used_and_a_fine_tuned_head_rebuilt(tmp_path: Path) -> None:
    tuned = seeded(lambda: torchvision.models.get_model(TINY_TORCHVISION, num_classes=7))
    path = tmp_path / "tuned.pth"
    torch.save(tuned.state_dict(), path)
    names = tuple(f"kind {index}" for index in range(7))

    loaded = zoo.load_model(f"torchvision:{TINY_TORCHVISION}", path, input_size=96)
    named = zoo.load_model(f"torchvision:{TINY_TORCHVISION}", path, class_names=names)

    assert loaded.classes == 7 and loaded.weights_sha256 == weights_io.sha256_file(path)
    assert (loaded.weights, loaded.weights_origin) == (str(path), f"weights {path}")
    assert zoo.load_model(f"torchvision:{TINY_TORCHVISION}").weights_origin == ""
    headless = {k: v for k, v in tuned.state_dict().items() if k != "classifier.1.weight"}
    torch.save(headless, path)  # the last layer's weight missing: no head to rebuild for
    with pytest.raises(ModelError, match=r"missing 1 \(e\.g\. classifier\.1\.weight\)"):
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}", path)
    assert loaded.spec.class_names == () and named.spec.class_names == names
    images = torch.rand(1, 3, 96, 96)
    mean, std = zoo.IMAGENET_MEAN, zoo.IMAGENET_STD
    expected = zoo.Normalized(weights_io.freeze(tuned), mean, std)(images)
    torch.testing.assert_close(loaded.module(images), expected, rtol=0, atol=0)


def as_published(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state_dict as torchvision's DenseNet files hold it: legacy 'norm.1' names and no
    BatchNorm step counters (the files predate them)."""
    legacy = re.compile(r"(denselayer\d+\.(?:norm|conv))([12])\.")
    return {
        legacy.sub(r"\1.\2.", key): value
        for key, value in state.items()
        if not key.endswith("num_batches_tracked")
    }


def test_densenet_files_as_torchvision_publishes_them_load(tmp_path: Path) -> None:
    state = seeded(lambda: torchvision.models.get_model("densenet121")).state_dict()
    published = as_published(state)
    assert "features.denseblock1.denselayer1.norm.1.weight" in published
    path = tmp_path / "densenet121-legacy.pth"
    torch.save(published, path)
    loaded = zoo.load_model("torchvision:densenet121", path, input_size=32)
    inner = loaded.module.model
    assert all(torch.equal(value, state[key]) for key, value in inner.state_dict().items())


def test_safetensors_weights_round_trip_from_a_file_and_bytes(tmp_path: Path) -> None:
    state = seeded(lambda: models.build("tutorial")).state_dict()
    path = tmp_path / "tutorial.safetensors"
    save_file(state, path)

    loaded = zoo.load_model("tutorial", path)

    for key, value in loaded.module.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert loaded.weights_sha256 == weights_io.sha256_file(path)
    from_bytes = weights_io.read_state_dict(path.read_bytes())
    assert from_bytes.keys() == state.keys()
    assert all(torch.equal(from_bytes[key], state[key]) for key in state)


def test_a_corrupt_safetensors_file_is_a_model_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.safetensors"
    save_file({"weight": torch.ones(4, 4)}, path)
    path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(ModelError, match="not a readable safetensors file"):
        weights_io.read_state_dict(path)
    with pytest.raises(ModelError, match="not a readable safetensors file"):
        weights_io.read_state_dict(path.read_bytes())


# ----------------------------------------------------------------------------- timm


def test_a_timm_model_takes_its_spec_from_timm_and_weights_from_a_file(tmp_path: Path) -> None:
    import timm
    from timm.data import resolve_data_config

    model = seeded(lambda: timm.create_model(TINY_TIMM, pretrained=False))
    path = tmp_path / "timm.safetensors"
    save_file(model.state_dict(), path)
    config = resolve_data_config({}, model=model)

    loaded = zoo.load_model(f"timm:{TINY_TIMM}", path)

    _, height, width = config["input_size"]
    assert loaded.spec.size == (height, width)
    assert loaded.spec.resize == int(height / config["crop_pct"])
    assert loaded.spec.mean == tuple(config["mean"]) and loaded.spec.std == tuple(config["std"])
    assert loaded.weights_sha256 == weights_io.sha256_file(path) and loaded.kind == "timm"
    assert (loaded.weights, loaded.weights_origin) == (str(path), f"weights {path}")
    images = torch.rand(1, 3, height, width)
    expected = zoo.Normalized(weights_io.freeze(model), config["mean"], config["std"])(images)
    torch.testing.assert_close(loaded.module(images), expected, rtol=0, atol=0)


def test_a_timm_models_resize_filter_and_outputs_follow_its_own_config() -> None:
    """test_vit's published config in timm: 160 pixels, bicubic, a 0.95 crop (resize 168)."""
    import timm

    config = timm.create_model("test_vit", pretrained=False).pretrained_cfg
    assert (config["input_size"], config["interpolation"], config["crop_pct"]) == (
        (3, 160, 160),
        "bicubic",
        0.95,
    )
    loaded = zoo.load_model("timm:test_vit")
    assert (loaded.spec.size, loaded.spec.resize, loaded.spec.interpolation) == (
        (160, 160),
        168,
        "bicubic",
    )
    assert (loaded.classes, loaded.weights, loaded.weights_origin) == (1000, None, "")
    assert loaded.describe() == (
        f"timm:test_vit (random weights, seed 0, untrained); input {loaded.spec.describe()}"
    )
    three = zoo.load_model("timm:test_resnet", class_names=["cat", "dog", "owl"])
    assert three.classes == 3 and three.module(torch.rand(1, 3, 160, 160)).shape == (1, 3)


@pytest.mark.parametrize(
    ("given", "interpolation", "resize"),
    [
        ({}, "bilinear", 64),  # neither named: bilinear, no margin
        ({"interpolation": "lanczos", "crop_pct": 0.5}, "bilinear", 128),  # no such PIL filter
        ({"interpolation": "nearest", "crop_pct": 0.875}, "nearest", 73),  # floor(64 / 0.875)
    ],
)
def test_a_timm_config_without_a_filter_or_crop_is_read_as_bilinear_without_margin(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, object], interpolation: str, resize: int
) -> None:
    import timm.data

    config = {"input_size": (3, 64, 48), "mean": (0.1, 0.2, 0.3), "std": (0.4, 0.5, 0.6), **given}
    monkeypatch.setattr(timm.data, "resolve_data_config", lambda *args, **kwargs: config)
    loaded = zoo.load_model(f"timm:{TINY_TIMM}")
    assert (loaded.spec.size, loaded.spec.resize) == ((64, 48), resize)
    assert loaded.spec.interpolation == interpolation
    assert (loaded.spec.mean, loaded.spec.std) == ((0.1, 0.2, 0.3), (0.4, 0.5, 0.6))


def test_a_timm_model_of_other_channels_or_weights_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import timm
    import timm.data

    other = tmp_path / "vit.safetensors"
    save_file(timm.create_model("test_vit", pretrained=False).state_dict(), other)
    with pytest.raises(ModelError, match=rf"^These weights are not for the 'timm:{TINY_TIMM}'"):
        zoo.load_model(f"timm:{TINY_TIMM}", other)
    grey = {"input_size": (1, 64, 64), "mean": (0.5,), "std": (0.5,)}
    monkeypatch.setattr(timm.data, "resolve_data_config", lambda *args, **kwargs: grey)
    with pytest.raises(ModelError) as refused:
        zoo.load_model(f"timm:{TINY_TIMM}")
    assert str(refused.value) == f"timm:{TINY_TIMM} takes 1-channel images; gradpick serves RGB."


def test_timm_missing_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(ModelError, match=r"pip install 'gradpick\[timm\]'"):
        zoo.load_model(f"timm:{TINY_TIMM}")


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("torchvision:resnet_18", "Unknown torchvision classification model 'resnet_18'.*resnet18"),
        ("torchvision:fasterrcnn_resnet50_fpn", "Unknown torchvision classification model"),
        ("timm:resnet_18", "Unknown timm model 'resnet_18'.*resnet18"),
        (
            "resnet",
            r"^Unknown model 'resnet'; use resnet20, tutorial, torchvision:NAME\[:WEIGHTS\], "
            r"timm:NAME, hf:PATH_OR_NAME or package\.module:factory\.$",
        ),
    ],
)
def test_unknown_names_list_close_matches(name: str, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        zoo.load_model(name)


def test_close_matches_are_the_five_nearest_at_half_similarity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """difflib's ratio 2M / T: 'alpha' and 'alphaN' score 10 / 11 (ties: the later name first),
    'abcdef' and 'abcxyz' exactly 0.5, which still counts."""
    import timm

    names = [f"alpha{n}" for n in range(1, 8)] + ["abcxyz", "qqqqqq"]
    monkeypatch.setattr(timm, "list_models", lambda *args, **kwargs: names)
    monkeypatch.setattr(timm, "is_model", lambda name: False)
    messages = {}
    for asked in ("alpha", "abcdef", "zzz"):
        with pytest.raises(ModelError) as unknown:
            zoo.load_model(f"timm:{asked}")
        messages[asked] = str(unknown.value)
    assert messages == {
        "alpha": "Unknown timm model 'alpha'. Close matches: alpha7, alpha6, alpha5, alpha4, "
        "alpha3.",
        "abcdef": "Unknown timm model 'abcdef'. Close matches: abcxyz.",
        "zzz": "Unknown timm model 'zzz'.",
    }


def test_only_the_spec_values_given_are_overrides() -> None:
    given = zoo.given_overrides("40x48", 72, (0.5,) * 3, (0.25,) * 3, ["cat", "dog"])
    assert given == {
        "input_size": "40x48",
        "resize": 72,
        "mean": (0.5, 0.5, 0.5),
        "std": (0.25, 0.25, 0.25),
        "class_names": ["cat", "dog"],
    }
    assert zoo.given_overrides(resize=0) == {"resize": 0}  # a resize of 0 is given, and refused
    assert zoo.given_overrides("", None, None, None, []) == {}


FACTORIES = """
import torch
from torch import nn

def gray():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())

def maps():
    return nn.Conv2d(3, 4, 3)

def five():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5))

def listed():
    return [nn.Linear(4, 5)]

def doubled():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()).double()

def pooled():
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())

class Broken(nn.Module):
    def __init__(self, message):
        super().__init__()
        self.message = message

    def forward(self, images):
        raise ValueError(self.message)

class Paired(nn.Module):
    def forward(self, images):
        return images.mean(dim=(2, 3)), images

def wordy():
    return Broken("first line" + chr(10) + "second line")

def silent():
    return Broken("")

def long():
    return Broken("x" * 300)

def paired():
    return Paired()
"""


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "zoo_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "zoo_factories"


def test_a_factory_model_gets_the_spec_it_is_given(factories: str) -> None:
    loaded = zoo.load_model(
        f"{factories}:five", input_size="40x48", mean=(0.5,) * 3, std=(0.25,) * 3
    )
    assert loaded.kind == "factory" and loaded.classes == 5
    assert loaded.spec.size == (40, 48) and isinstance(loaded.module, zoo.Normalized)
    plain = zoo.load_model(f"{factories}:five")
    assert plain.spec.size == (32, 32) and not isinstance(plain.module, zoo.Normalized)
    assert "(its own weights)" in plain.describe() and plain.weights is None
    with pytest.raises(InputError, match="are 32x32 pixels but .* takes 40x48"):
        loaded.check_images(torch.zeros(2, 3, 32, 32))


def test_a_model_for_other_channels_is_refused_at_load(factories: str) -> None:
    with pytest.raises(ModelError, match="cannot take 3-channel 32x32 images.*channels"):
        zoo.load_model(f"{factories}:gray")


def test_a_model_whose_outputs_are_not_logits_is_refused_at_load(factories: str) -> None:
    with pytest.raises(ModelError, match=r"returns \[1, 4, 30, 30\].*\[1, classes\]"):
        zoo.load_model(f"{factories}:maps")


def test_a_factory_that_is_not_one_or_whose_weights_do_not_fit_is_named(
    factories: str, tmp_path: Path
) -> None:
    with pytest.raises(ModelError) as returned:
        zoo.load_model(f"{factories}:listed")
    assert str(returned.value) == f"'{factories}:listed' returned list, not a torch.nn.Module."
    with pytest.raises(ModelError, match="has no attribute 'five:extra'"):
        zoo.load_model(f"{factories}:five:extra")  # the module is all before the first colon
    other = tmp_path / "other.pt"
    torch.save({"weight": torch.ones(2)}, other)
    with pytest.raises(ModelError, match=f"^These weights are not for the '{factories}:five'"):
        zoo.load_model(f"{factories}:five", other)


def test_images_of_another_shape_or_channel_count_are_refused(factories: str) -> None:
    loaded = zoo.load_model(f"{factories}:five")
    with pytest.raises(InputError) as flat:
        loaded.check_images(torch.zeros(3, 32, 32))
    assert str(flat.value) == "Images must be [N, 3, H, W]; got [3, 32, 32]."
    with pytest.raises(InputError, match=r"got \[2, 1, 32, 32\]"):
        loaded.check_images(torch.zeros(2, 1, 32, 32))
    loaded.check_images(torch.zeros(2, 3, 32, 32))


def test_the_load_probe_runs_in_the_models_own_dtype_with_or_without_parameters(
    factories: str,
) -> None:
    doubled = zoo.load_model(f"{factories}:doubled")
    assert doubled.classes == 4 and doubled.module(torch.zeros(1, 3, 32, 32).double()).shape == (
        1,
        4,
    )
    assert zoo.load_model(f"{factories}:pooled").classes == 3  # no parameters: float32


def test_a_model_that_fails_or_returns_no_tensor_is_named_with_its_first_line(
    factories: str,
) -> None:
    tail = ". Check its input channels and --input-size."
    expected = {
        "wordy": "(ValueError: first line)",
        "silent": "(ValueError: ValueError)",
        "long": f"(ValueError: {'x' * 200})",
    }
    for factory, detail in expected.items():
        with pytest.raises(ModelError) as failed:
            zoo.load_model(f"{factories}:{factory}")
        assert str(failed.value) == (
            f"{factories}:{factory} cannot take 3-channel 32x32 images {detail}{tail}"
        )
    with pytest.raises(ModelError) as paired:
        zoo.load_model(f"{factories}:paired")
    assert str(paired.value) == (
        f"{factories}:paired returns tuple for one image; gradpick needs logits of shape "
        "[1, classes]."
    )


def test_class_names_must_match_the_outputs(factories: str) -> None:
    with pytest.raises(ModelError) as mismatch:
        zoo.load_model(f"{factories}:five", class_names=("a", "b", "c"))
    assert str(mismatch.value) == (
        f"{factories}:five predicts 5 classes but 3 class names are given; give one name per "
        "output."
    )
    three = zoo.load_model(f"torchvision:{TINY_TORCHVISION}", class_names=("a", "b", "c"))
    assert three.classes == 3 and three.spec.class_names == ("a", "b", "c")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"mean": (0.5, 0.5)}, "needs one value per colour channel"),
        ({"std": (0.5, 0.0, 0.5)}, "must be positive"),
        ({"input_size": "224x"}, "is not a size"),
        ({"resize": 0}, "between 1 and"),
        ({"crop": 3, "zoom": 2}, r"^Unknown spec setting\(s\): crop, zoom\.$"),
    ],
)
def test_an_impossible_spec_is_an_input_error(overrides: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        zoo.load_model(f"torchvision:{TINY_TORCHVISION}", **overrides)


# ----------------------------------------------------------------------------- command line


@pytest.fixture
def folder(image_folder_factory) -> Path:
    return image_folder_factory(classes=2, per_class=2)


def test_the_cli_serves_a_torchvision_model_with_spec_flags(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "g.npz"
    flags = ["--model", "torchvision:resnet18", "--input-size", "32", "--data", str(folder)]
    spec_flags = ["--mean", "0.5", "0.5", "0.5", "--std", "0.25", "0.25", "0.25"]

    # The folder's two classes are not the model's 1,000, so its labels are ignored and the
    # gradient is of the predicted class's logit.
    picks = ["--indices", "0, 3", "--target", "logit"]
    status = main(["grads", *flags, *spec_flags, *picks, "--out", str(out)])

    assert status == 0, capsys.readouterr().err
    assert "input 32x32" in capsys.readouterr().out
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["model"]["name"] == "torchvision:resnet18"
    assert sidecar["model"]["input_spec"]["mean"] == [0.5, 0.5, 0.5]
    assert sidecar["model"]["input_spec"]["std"] == [0.25, 0.25, 0.25]
    loaded = zoo.load_model("torchvision:resnet18", input_size=32, mean=(0.5,) * 3, std=(0.25,) * 3)
    pixels = [InputSpec(size=32).prepare(Image.open(path))[0] for path in sample_paths(folder)]
    images = torch.stack([pixels[0], pixels[3]]).float() / 255
    expected = input_gradients(loaded.module, images, [0, 1], target="logit").gradients
    np.testing.assert_array_equal(np.load(out)["gradients"], expected.numpy())


def sample_paths(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/*.png"))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--input-size", "32", "--mean", "0.5", "0.5"], "needs one value per colour channel"),
        (["--input-size", "abc"], "is not a size"),
    ],
)
def test_cli_spec_flags_that_do_not_fit_are_one_clear_line(
    folder: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    status = main(["infer", "--model", "torchvision:resnet18", *flags, "--data", str(folder)])
    err = capsys.readouterr().err
    assert status == 2 and message in err and "Traceback" not in err


def test_cli_reads_the_images_at_the_input_size_the_flags_set(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        ["infer", "--model", "torchvision:resnet18", "--input-size", "64", "--data", str(folder)]
    )
    printed = capsys.readouterr().out
    assert status == 0 and "input 64x64 (shorter side 64" in printed


def test_cli_eval_of_a_model_for_other_classes_is_one_clear_line(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["eval", "torchvision:resnet18", "--input-size", "32", "--data", str(folder)])
    err = capsys.readouterr().err
    assert status == 2 and "predicts 1000 classes but" in err and "has 2" in err


def test_cli_takes_safetensors_weights(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tutorial.safetensors"
    save_file(seeded(lambda: models.build("tutorial")).state_dict(), path)
    status = main(["infer", "--model", "tutorial", "--weights", str(path), "--data", str(folder)])
    assert status == 0 and f"weights {path}" in capsys.readouterr().out


def test_shipped_weights_are_named_within_the_package_not_by_a_server_path() -> None:
    """Identities go into exports, reports and stores, also from the hosted demo."""
    import gradpick

    loaded = zoo.load_model("resnet20")
    assert loaded.identity()["weights"] == "gradpick/assets/resnet20.pt"
    assert str(Path(gradpick.__file__).parent) not in json.dumps(loaded.identity())


def test_a_factory_model_with_weights_serves_them_and_is_named_by_them(
    factories: str, tmp_path: Path
) -> None:
    import hashlib

    plain = zoo.load_model(f"{factories}:five")
    state = {key: torch.full_like(value, 0.25) for key, value in plain.module.state_dict().items()}
    weights = tmp_path / "five.pt"
    torch.save(state, weights)
    loaded = zoo.load_model(f"{factories}:five", weights)
    assert loaded.weights == str(weights) and loaded.weights_origin == ""
    assert loaded.weights_sha256 == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert all(torch.equal(loaded.module.state_dict()[key], state[key]) for key in state)
    assert loaded.spec.size == (32, 32) and loaded.kind == "factory"
    assert loaded.describe().startswith(f"{factories}:five (weights {weights}); input ")


def test_a_built_in_models_identity_carries_its_shipped_card() -> None:
    """Read from the shipped card file itself, as a sidecar's reader would."""
    import hashlib
    import json
    from importlib import resources

    assets = resources.files("gradpick") / "assets"
    card = json.loads((assets / "resnet20.json").read_text())
    loaded = zoo.load_model("resnet20")
    identity = loaded.identity()
    assert identity["identity"] == loaded.store_identity and identity["kind"] == "built-in"
    assert (
        identity["weights_sha256"]
        == hashlib.sha256((assets / "resnet20.pt").read_bytes()).hexdigest()
    )
    assert identity["card_sha256"] == card["sha256"]
    assert identity["card_test_accuracy"] == card["test_accuracy"]
    assert identity["trained_on"] == card["trained_on"] and identity["classes"] == 10
    assert loaded.weights_origin == "shipped weights"
