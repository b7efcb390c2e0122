"""The two architectures, loading weights safely, and clear errors for unusable weights files."""

from __future__ import annotations

import io
import os
import pickle
import re
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

from gradpick.errors import ModelError
from gradpick.models import shipped as models
from gradpick.models import weights as weights_io
from gradpick.models import zoo


def seeded_state(name: str, seed: int = 3) -> dict[str, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return models.build(name).state_dict()


def saved(state: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "low", "high"), [("tutorial", 62_006, 62_006), ("resnet20", 0.26e6, 0.28e6)]
)
def test_built_models_map_images_to_ten_logits(name: str, low: float, high: float) -> None:
    model = models.build(name)
    count = sum(parameter.numel() for parameter in model.parameters())
    assert low <= count <= high
    assert model.training and all(p.requires_grad for p in model.parameters())
    with torch.no_grad():
        logits = model.eval()(torch.rand(2, 3, 32, 32))
    assert logits.shape == (2, 10) and logits.dtype == torch.float32


def test_the_tutorial_net_is_exactly_the_pytorch_tutorial() -> None:
    layers = [
        (name, tuple(module.weight.shape))
        for name, module in models.TutorialNet().named_modules()
        if isinstance(module, nn.Conv2d | nn.Linear)
    ]
    assert layers == [
        ("conv1", (6, 3, 5, 5)),
        ("conv2", (16, 6, 5, 5)),
        ("fc1", (120, 400)),
        ("fc2", (84, 120)),
        ("fc3", (10, 84)),
    ]


def test_resnet20_has_three_stages_of_three_blocks() -> None:
    model = models.ResNet20()
    for stage, width in ((model.layer1, 16), (model.layer2, 32), (model.layer3, 64)):
        assert len(stage) == 3
        assert all(block.conv2.out_channels == width for block in stage)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) + 1 == 20  # 19 convolutions and the classifier
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 19


def test_normalisation_lives_inside_the_model_and_is_not_a_weight() -> None:
    model = models.build("tutorial")
    assert not any(key.startswith("normalize") for key in model.state_dict())
    images = torch.full((1, 3, 32, 32), 0.5)
    mean = torch.tensor(models.CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(models.CIFAR10_STD).view(1, 3, 1, 1)
    assert torch.allclose(model.normalize(images), (images - mean) / std)


def test_an_unknown_model_name_lists_the_choices() -> None:
    with pytest.raises(ModelError, match="Unknown model 'vgg'.*resnet20, tutorial"):
        models.build("vgg")


@pytest.mark.parametrize("name", ["tutorial", "resnet20"])
@pytest.mark.parametrize("form", ["path", "bytes"])
def test_load_weights_from_a_path_or_bytes(tmp_path: Path, name: str, form: str) -> None:
    state = seeded_state(name)
    weights: Path | bytes = saved(state)
    if form == "path":
        path = tmp_path / "weights.pt"
        path.write_bytes(saved(state))
        weights = path
    model = models.load(name, weights=weights, device="cpu")
    assert not any(module.training for module in model.modules())
    assert not any(parameter.requires_grad for parameter in model.parameters())
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_a_training_checkpoint_with_a_model_entry_loads(tmp_path: Path) -> None:
    state = seeded_state("tutorial")
    model = models.load("tutorial", weights=saved({"model": state, "epoch": torch.tensor(3)}))
    assert torch.equal(model.state_dict()["fc3.weight"], state["fc3.weight"])


def test_weights_for_another_architecture_are_named(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not for the 'resnet20' architecture.*missing"):
        models.load("resnet20", weights=saved(seeded_state("tutorial")))
    state = seeded_state("tutorial")
    state["fc3.weight"] = torch.zeros(5, 84)
    with pytest.raises(ModelError, match="wrong shape for fc3.weight"):
        models.load("tutorial", weights=saved(state))


def test_non_finite_weights_are_refused() -> None:
    state = seeded_state("tutorial")
    state["conv2.bias"][3] = float("nan")
    with pytest.raises(ModelError, match="NaN or infinite.*conv2.bias"):
        models.load("tutorial", weights=saved(state))


@pytest.mark.parametrize(
    "payload",
    [os.urandom(512), b"just some text, not weights", b"", saved(seeded_state("tutorial"))[:300]],
    ids=["random bytes", "text", "empty", "truncated"],
)
def test_a_corrupt_file_is_a_model_error(tmp_path: Path, payload: bytes) -> None:
    path = tmp_path / "broken.pt"
    path.write_bytes(payload)
    with pytest.raises(ModelError, match="broken.pt: not a readable PyTorch weights file"):
        models.load("tutorial", weights=path)


def test_a_missing_file_is_a_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such weights file"):
        models.load("tutorial", weights=tmp_path / "absent.pt")


def test_a_dict_that_is_not_a_state_dict_is_refused() -> None:
    with pytest.raises(ModelError, match="expected a state_dict"):
        weights_io.read_state_dict(saved({"weights": [1, 2, 3]}))
    with pytest.raises(ModelError, match="expected a state_dict"):
        weights_io.read_state_dict(saved(torch.ones(3)))


class Payload:
    """Unpickling this calls open(marker, "w"), creating the marker file: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def torch_zip_with(payload: object) -> bytes:
    """A genuine torch.save zip whose pickle is replaced by one holding ``payload``."""
    original = zipfile.ZipFile(io.BytesIO(saved({"w": torch.ones(2)})))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as crafted:
        for item in original.infolist():
            content = original.read(item.filename)
            if item.filename.endswith("data.pkl"):
                content = pickle.dumps({"w": payload}, protocol=2)
            crafted.writestr(item, content)
    return buffer.getvalue()


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize(
    ("container", "message"),
    [
        ("pickle protocol 2", "refused.*other than tensors.*GLOBAL"),
        ("pickle protocol 4", "not a readable PyTorch weights file"),  # unparsable, so unread
        ("torch zip", "refused.*other than tensors.*GLOBAL"),
    ],
)
def test_a_pickle_that_would_run_code_is_refused_unrun(
    tmp_path: Path, container: str, message: str
) -> None:
    marker = tmp_path / "code-ran"
    payload = Payload(marker)
    pickle.loads(pickle.dumps(Payload(tmp_path / "control"))).close()  # it really would
    assert (tmp_path / "control").exists()
    if container == "torch zip":
        data = torch_zip_with(payload)
    else:
        data = pickle.dumps({"w": payload}, protocol=int(container[-1]))
    path = tmp_path / "evil.pt"
    path.write_bytes(data)
    with pytest.raises(ModelError, match=f"evil.pt: {message}"):
        models.load("tutorial", weights=path)
    with pytest.raises(ModelError, match=f"uploaded weights: {message}"):
        weights_io.read_state_dict(data)
    assert not marker.exists()


def test_no_shipped_weights_is_explained(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path))
    assert models.shipped_models() == []
    assert models.model_card("tutorial") is None
    with pytest.raises(ModelError, match="No shipped weights for 'tutorial'.*gradpick train"):
        models.load("tutorial")


def test_shipped_weights_and_cards_are_found_in_the_assets_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path))
    state = seeded_state("tutorial")
    (tmp_path / "tutorial.pt").write_bytes(saved(state))
    (tmp_path / "tutorial.json").write_text('{"name": "tutorial", "test_accuracy": 0.5}')
    assert models.shipped_models() == ["tutorial"]
    assert models.model_card("tutorial") == {"name": "tutorial", "test_accuracy": 0.5}
    loaded = models.load("tutorial")
    assert torch.equal(loaded.state_dict()["fc1.weight"], state["fc1.weight"])


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "blob"
    path.write_bytes(os.urandom(3 << 20))
    assert weights_io.sha256_file(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_freeze_puts_a_model_in_eval_with_frozen_parameters() -> None:
    model = weights_io.freeze(models.build("resnet20"))
    assert not any(module.training for module in model.modules())
    assert not any(parameter.requires_grad for parameter in model.parameters())


USER_MODEL_CODE = """
import torch
from torch import nn


def small():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 4))


def broken():
    raise RuntimeError("no such checkpoint")


def not_a_model():
    return 42
"""


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module of the user's, importable as ``my_models_<id>`` for the duration of a test."""
    name = f"my_models_{os.getpid()}_{id(tmp_path)}"
    (tmp_path / f"{name}.py").write_text(USER_MODEL_CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_a_user_factory_model_is_served_frozen(user_package: str, tmp_path: Path) -> None:
    model = zoo.from_factory(f"{user_package}:small")
    assert not model.training
    assert not any(parameter.requires_grad for parameter in model.parameters())
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 4)
    state = {key: torch.full_like(value, 0.5) for key, value in model.state_dict().items()}
    weights = tmp_path / "small.pt"
    torch.save(state, weights)
    reloaded = zoo.from_factory(f"{user_package}:small", weights=weights)
    assert torch.equal(reloaded.state_dict()["1.weight"], state["1.weight"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon_here", "package.module:factory"),
        ("surely_missing_package_xyz:make", "Cannot import"),
        ("{package}:missing", "Cannot import"),
        ("{package}:broken", "RuntimeError: no such checkpoint"),
        ("{package}:not_a_model", "not a torch.nn.Module"),
    ],
)
def test_a_bad_user_factory_is_explained(user_package: str, spec: str, message: str) -> None:
    with pytest.raises(ModelError, match=re.escape(message)):
        zoo.from_factory(spec.format(package=user_package))


def test_user_weights_for_another_model_are_refused(user_package: str, tmp_path: Path) -> None:
    weights = tmp_path / "resnet.pt"
    torch.save(models.build("resnet20").state_dict(), weights)
    with pytest.raises(ModelError, match="not for the"):
        zoo.from_factory(f"{user_package}:small", weights=weights)
