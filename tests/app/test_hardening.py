"""AppTest: hosted mode, the user's own model, uploaded weights and bad inputs.

Each bad input must get a clear message while the batch, its results and the user's picks
stay as they were. The page runs on a generated CIFAR-10-shaped folder with random-weight
built-in models (an empty assets folder), as in test_app.py, whose helpers are reused.
"""

from __future__ import annotations

import io
import pickle
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest

from gradpick import data
from gradpick.errors import InputError
from gradpick.models import shipped as models
from gradpick.ui import config, keys
from gradpick.ui.config import AppConfig, UserModelArgs, hosted_mode, parse_user_model
from tests.app.test_app import (
    TUTORIAL,
    captioned_indices,
    index_box,
    metrics,
    no_errors,
    open_app,
    select,
    table,
)
from tests.models.test_shipped import Payload, torch_zip_with

IMAGES = 64


@pytest.fixture
def hosted(generated: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(config.HOSTED_ENV, "1")
    return generated


def png(seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (32, 32), colour) for colour in ("red", "blue")]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


def uploads(app: AppTest, files: list[tuple[str, bytes]]) -> AppTest:
    """Upload ``files`` as images (switching the source to uploads first)."""
    if app.sidebar.radio(key="source_kind").value != "upload":
        app.sidebar.radio(key="source_kind").set_value("upload").run()
    app.sidebar.file_uploader(key="uploads").set_value(
        [(name, content, "image/png") for name, content in files]
    )
    return app.run()


def errors(app: AppTest) -> str:
    return "\n".join(error.value for error in app.error)


# ----------------------------------------------------------------------------- hosted mode


@pytest.mark.parametrize(
    ("setting", "cwd", "expected"),
    [
        (None, "/mount/src/gradpick", True),
        ("", "/mount/src", True),
        ("0", "/mount/src/gradpick", False),
        (None, "/work/gradpick", False),
        ("1", "/work/gradpick", True),
        ("true", "/home/me", True),
        ("no", "/home/me", False),
    ],
)
def test_hosted_mode_follows_the_setting_else_the_cloud_folder(
    setting: str | None, cwd: str, expected: bool
) -> None:
    assert hosted_mode(setting, Path(cwd)) is expected


def test_hosted_limits_apply_only_when_hosted() -> None:
    assert AppConfig(hosted=True).max_upload_files == config.HOSTED_MAX_UPLOAD_FILES
    assert AppConfig(hosted=True).max_batch_size == config.HOSTED_MAX_BATCH_SIZE
    assert not AppConfig(hosted=True).allow_user_model
    local = AppConfig()
    assert local.allow_user_model and local.allow_local_folder
    assert local.max_upload_files is local.max_image_bytes is local.max_batch_size is None


def test_hosted_page_says_so_and_offers_no_local_folder(hosted: Path) -> None:
    app = open_app(**TUTORIAL)
    no_errors(app)
    assert "folder" not in app.sidebar.radio(key="source_kind").options
    assert any("Hosted demo" in caption.value for caption in app.caption)


@pytest.mark.parametrize("hosting", [False, True])
def test_a_hosted_page_keeps_no_store_on_the_servers_disk(
    generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hosting: bool
) -> None:
    import streamlit as st

    monkeypatch.setenv(config.HOSTED_ENV, "1" if hosting else "0")
    monkeypatch.setenv(data.CACHE_DIR_ENV, str(tmp_path / "cache"))
    st.cache_data.clear()  # an earlier test's inference of the same batch would skip keeping it
    app = open_app(**TUTORIAL)
    no_errors(app)
    assert metrics(app)["Images N"] == str(IMAGES)
    kept = list((tmp_path / "cache" / "outputs").glob("*/*.parquet"))
    assert (not kept) if hosting else len(kept) == 1  # a local page keeps its inference


def test_a_local_page_has_no_hosted_caption(generated: Path) -> None:
    app = open_app(**TUTORIAL)
    assert "Local folder" in app.sidebar.radio(key="source_kind").options
    assert not any("Hosted demo" in caption.value for caption in app.caption)
    assert f"folder {generated / 'test'}, {IMAGES} images" in page_text(app)


def page_text(app: AppTest) -> str:
    """Every caption, message and metric of the page, sidebar included, one per line."""
    shown = [app.caption, app.markdown, app.info, app.warning, app.error, app.success]
    lines = [str(element.value) for elements in shown for element in elements]
    lines += [f"{metric.label}: {metric.value}" for metric in app.metric]
    return "\n".join(lines)


def test_a_hosted_page_names_the_data_never_the_server_folder(hosted: Path) -> None:
    app = open_app(**TUTORIAL)
    no_errors(app)
    assert f"CIFAR-10, test split, {IMAGES} images" in page_text(app)
    assert str(hosted) not in page_text(app)


def test_a_hosted_page_names_the_data_it_cannot_read(
    hosted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "cifar10-jpg"
    monkeypatch.setenv(data.CIFAR10_DIR_ENV, str(missing))
    app = open_app(**TUTORIAL)
    assert not app.exception
    assert errors(app).startswith("CIFAR-10, test split: the images could not be read")
    assert str(missing) not in page_text(app)


def test_hosted_uploads_are_limited_in_count_and_bytes(hosted: Path) -> None:
    limit = config.HOSTED_MAX_UPLOAD_FILES
    app = uploads(open_app(**TUTORIAL), [(f"{i:03d}.png", png(i)) for i in range(limit + 1)])
    assert f"at most {limit} images per upload" in errors(app)
    assert metrics(app)["Images N"] == str(limit)
    padded = png(1) + b"\0" * config.HOSTED_MAX_IMAGE_BYTES
    app = uploads(app, [("small.png", png(0)), ("huge.png", padded)])
    assert "huge.png" in errors(app) and "per image" in errors(app)
    assert metrics(app)["Images N"] == "1"
    assert not app.exception


def test_hosted_batch_size_is_capped(hosted: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config, "HOSTED_MAX_BATCH_SIZE", 32)
    app = open_app(**TUTORIAL)
    assert metrics(app)["Images N"] == "32"
    app = select(app, keys.SCATTER_CHART, [3])
    size = next(box for box in app.sidebar.number_input if box.label == "Batch size N")
    size.set_value(40).run()
    assert "this demo's cap" in errors(app)
    assert metrics(app)["Images N"] == "32"
    assert captioned_indices(app) == [3]


# ----------------------------------------------------------------------------- your own model


def test_user_model_arguments_come_from_argv_or_the_environment() -> None:
    argv = ["-q", "--model", "pkg.mod:make", "--weights", "w.pt", "--unknown", "x"]
    assert parse_user_model(argv, {}) == UserModelArgs("pkg.mod:make", "w.pt", None)
    env = {config.MODEL_ENV: "a.b:c", config.CLASSES_ENV: "names.txt"}
    assert parse_user_model(["-m", "not e2e"], env) == UserModelArgs("a.b:c", None, "names.txt")
    assert parse_user_model(["--model", "x.y:z"], env) == UserModelArgs("x.y:z", None, "names.txt")
    assert parse_user_model(["--modelx", "q"], {}) is None
    spec = ["--model", "torchvision:resnet18", "--input-size", "224x160", "--resize", "256"]
    spec += ["--mean", "0.5", "0.5", "0.5", "--std", "0.2", "0.2", "0.2"]
    assert parse_user_model(spec, {}) == UserModelArgs(
        "torchvision:resnet18", None, None, "224x160", 256, (0.5,) * 3, (0.2,) * 3
    )
    with pytest.raises(InputError, match="--resize: invalid int value"):
        parse_user_model(["--model", "timm:resnet18", "--resize", "big"], {})
    with pytest.raises(InputError, match="--model package.module:factory"):
        parse_user_model(["--model"], {})


def test_a_bad_command_line_is_explained_on_the_page(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["app.py", "--weights"])
    app = open_app(**TUTORIAL)
    assert "The command line: argument --weights: expected one argument" in errors(app)
    assert metrics(app)["Images N"] == str(IMAGES)


USER_MODULE = '''
import torch
from torch import nn


def three_classes():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 3))


def broken():
    raise RuntimeError("the factory is broken")


class Moody(nn.Module):
    """Fails on batches of exactly 2 images: one request fails, the next works."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3 * 32 * 32, 10)

    def forward(self, images):
        if images.shape[0] == 2:
            raise ValueError("moody model refuses pairs")
        return self.linear(images.flatten(1))


def moody():
    torch.manual_seed(0)
    return Moody()


class Hungry(nn.Module):
    """Like a GPU with room for LIMIT images' activations: a gradient step on more runs out of
    device memory (LIMIT 0: even one image does). Inference, without gradients, always fits."""

    LIMIT = 2

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(3 * 32 * 32, 10)

    def forward(self, images):
        if torch.is_grad_enabled() and images.shape[0] > Hungry.LIMIT:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.linear(images.flatten(1))


def hungry():
    torch.manual_seed(0)
    return Hungry()
'''


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """A module of model factories on sys.path, named per test so no import cache is shared."""
    name = "gp_user_" + request.node.name.split("[")[0].removeprefix("test_")[:40]
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_your_model_with_weights_and_class_names(
    generated: Path, user_module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"{user_module}:three_classes"
    linear = torch.nn.Linear(3 * 32 * 32, 3)
    state_dict = {"1.weight": torch.zeros_like(linear.weight), "1.bias": torch.tensor([0, 0, 5.0])}
    torch.save(state_dict, tmp_path / "weights.pt")
    (tmp_path / "names.txt").write_text("alpha\nbeta\ngamma\n")
    monkeypatch.setenv(config.MODEL_ENV, spec)
    monkeypatch.setenv(config.WEIGHTS_ENV, str(tmp_path / "weights.pt"))
    monkeypatch.setenv(config.CLASSES_ENV, str(tmp_path / "names.txt"))
    app = open_app()
    no_errors(app)
    assert app.sidebar.selectbox(key="model").value.startswith(f"user:{spec}:")
    assert any(caption.value == f"Your model: {spec}" for caption in app.sidebar.caption)
    assert set(table(app)["predicted"]) == {"gamma"}  # the weights' bias decides every image
    assert any("predicts 3; their labels are ignored" in w.value for w in app.warning)
    # CIFAR-10 labels mean nothing to this model: the loss is not offered as a target.
    target = app.sidebar.radio(key="target_mode")
    assert target.value == "predicted"
    assert "Loss on the true label" not in target.options
    app = select(app, keys.SCATTER_CHART, [2])
    no_errors(app)
    assert captioned_indices(app) == [2]


def test_your_model_without_class_names_uses_numbered_classes(
    generated: Path, user_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.MODEL_ENV, f"{user_module}:three_classes")
    app = open_app()
    assert set(table(app)["predicted"]) <= {"class 0", "class 1", "class 2"}
    assert not app.exception


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("broken", "raised RuntimeError: the factory is broken"),
        ("missing", "Cannot import"),
        ("three_classes --weights", "no such weights file"),
    ],
)
def test_a_failing_model_is_explained_and_the_built_in_models_remain(
    generated: Path,
    user_module: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    factory: str,
    message: str,
) -> None:
    name, _, weights = factory.partition(" --weights")
    monkeypatch.setenv(config.MODEL_ENV, f"{user_module}:{name}")
    if _ == " --weights":
        monkeypatch.setenv(config.WEIGHTS_ENV, str(tmp_path / "absent.pt"))
    app = open_app()
    assert message in errors(app)
    assert metrics(app)["Images N"] == str(IMAGES)
    assert not app.exception
    app.sidebar.selectbox(key="model").set_value("tutorial:random-seed0").run()
    assert metrics(app)["Images N"] == str(IMAGES)


def test_a_torchvision_model_with_its_spec_from_the_command_line_and_the_sidebar(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.MODEL_ENV, "torchvision:resnet18")
    monkeypatch.setattr(sys, "argv", ["app.py", "--input-size", "32"])
    app = open_app()
    no_errors(app)
    assert app.sidebar.selectbox(key="model").value.startswith("user:torchvision:resnet18:")
    assert app.sidebar.text_input(key="spec_size").value == "32"
    assert metrics(app)["Images N"] == str(IMAGES)
    app.sidebar.text_input(key="spec_mean").set_value("a, b").run()
    assert "Mean 'a, b' is not a list of numbers" in errors(app)
    assert app.sidebar.selectbox(key="model").value.startswith("user:torchvision:resnet18:")
    app.sidebar.text_input(key="spec_mean").set_value("0.5, 0.5").run()
    assert "needs one value per colour channel" in errors(app)
    assert metrics(app)["Images N"] == str(IMAGES) and not app.exception


def test_the_images_are_read_at_the_input_size_of_the_model(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.MODEL_ENV, "torchvision:resnet18")
    monkeypatch.setattr(sys, "argv", ["app.py", "--input-size", "48", "--resize", "56"])
    app = open_app()
    no_errors(app)
    captions = [caption.value for caption in app.caption]
    assert any(
        "Images read at 48x48 pixels" in text and "shorter side 56" in text for text in captions
    ), captions
    assert metrics(app)["Images N"] == str(IMAGES)


def test_wrong_weights_for_your_model_are_explained(
    generated: Path, user_module: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch.save(models.build("tutorial").state_dict(), tmp_path / "tutorial.pt")
    monkeypatch.setenv(config.MODEL_ENV, f"{user_module}:three_classes")
    monkeypatch.setenv(config.WEIGHTS_ENV, str(tmp_path / "tutorial.pt"))
    app = open_app()
    assert "not for the" in errors(app)
    assert metrics(app)["Images N"] == str(IMAGES)
    assert not app.exception


def test_your_model_is_refused_in_hosted_mode(
    hosted: Path, user_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.MODEL_ENV, f"{user_module}:three_classes")
    app = open_app()
    assert "turned off in hosted mode" in errors(app)
    assert not any(o.startswith("user:") for o in app.sidebar.selectbox(key="model").options)
    assert user_module not in sys.modules
    assert metrics(app)["Images N"] == str(IMAGES)


def test_a_failing_request_is_explained_and_the_next_one_works(
    generated: Path, user_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.MODEL_ENV, f"{user_module}:moody")
    app = select(open_app(), keys.SCATTER_CHART, [1])
    no_errors(app)
    app = select(app, keys.SCATTER_CHART, [2, 5])
    assert "moody model refuses pairs" in errors(app)
    assert metrics(app)["Images N"] == str(IMAGES)
    app = select(app, keys.SCATTER_CHART, [4, 6, 9])
    no_errors(app)
    assert captioned_indices(app) == [4, 6, 9]


def test_device_out_of_memory_retries_in_smaller_chunks_then_explains(
    generated: Path, user_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.MODEL_ENV, f"{user_module}:hungry")
    app = select(open_app(), keys.SCATTER_CHART, [1, 3, 5, 7, 9])
    no_errors(app)
    assert captioned_indices(app) == [1, 3, 5, 7, 9]
    assert metrics(app)["Strategy"] == "recompute · 3 chunks"  # 5 failed, then 2 + 2 + 1
    outputs = (metrics(app)["Images N"], metrics(app)["Accuracy"], table(app).to_dict())

    sys.modules[user_module].Hungry.LIMIT = 0  # type: ignore[attr-defined]
    app = select(app, keys.SCATTER_CHART, [2, 4])
    assert "ran out of memory with one image at a time" in errors(app)
    assert "Pick fewer images" in errors(app)
    assert (metrics(app)["Images N"], metrics(app)["Accuracy"], table(app).to_dict()) == outputs

    sys.modules[user_module].Hungry.LIMIT = 2  # type: ignore[attr-defined]
    app = select(app, keys.SCATTER_CHART, [6, 8])
    no_errors(app)
    assert captioned_indices(app) == [6, 8]
    assert metrics(app)["Strategy"] == "recompute"


# ----------------------------------------------------------------------------- uploaded weights


def saved(state_dict: dict[str, torch.Tensor]) -> bytes:
    buffer = io.BytesIO()
    torch.save(state_dict, buffer)
    return buffer.getvalue()


def upload_weights(app: AppTest, name: str, content: bytes) -> AppTest:
    app.sidebar.file_uploader(key="weights_upload").set_value(
        (name, content, "application/octet-stream")
    )
    return app.run()


def test_uploaded_weights_replace_the_architectures_weights(generated: Path) -> None:
    weights = models.build("tutorial").state_dict()
    weights["fc3.weight"].zero_()
    weights["fc3.bias"].copy_(torch.arange(10.0) == 3)  # every image predicted "cat"
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [1, 2])
    app = upload_weights(app, "cat.pt", saved(weights))
    no_errors(app)
    assert set(table(app)["predicted"]) == {"cat"}
    assert app.sidebar.selectbox(key="model").value == "tutorial:random-seed0"
    assert any("your upload cat.pt" in caption.value for caption in app.sidebar.caption)
    assert not any("random weights" in warning.value for warning in app.sidebar.warning)
    assert captioned_indices(app) == [1, 2]


def test_a_pickle_carrying_code_is_refused_unrun_and_the_model_kept(
    generated: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "code-ran"
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [1, 2])
    before = table(app)
    app = upload_weights(app, "evil.pt", torch_zip_with(Payload(marker)))
    assert "refused" in errors(app) and "other than tensors" in errors(app)
    assert not marker.exists()
    app = upload_weights(app, "evil.pth", pickle.dumps({"w": Payload(marker)}, protocol=2))
    assert "refused" in errors(app)
    assert not marker.exists()
    assert table(app).equals(before)
    assert captioned_indices(app) == [1, 2]
    assert not app.exception


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (lambda: models.build("resnet20").state_dict(), "not for the 'tutorial' architecture"),
        (
            lambda: {
                key: value.fill_(float("nan")) if key == "fc1.bias" else value
                for key, value in models.build("tutorial").state_dict().items()
            },
            "NaN or infinite",
        ),
        (lambda: {}, "missing"),
    ],
)
def test_unusable_weights_are_explained_and_the_model_kept(
    generated: Path, weights: Callable[[], dict[str, torch.Tensor]], message: str
) -> None:
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [5])
    before = table(app)
    app = upload_weights(app, "bad.pt", saved(weights()))
    assert message in errors(app)
    assert table(app).equals(before)
    assert captioned_indices(app) == [5]
    assert any("random weights" in warning.value for warning in app.sidebar.warning)
    assert not app.exception


# ----------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("name", "make", "message"),
    [
        ("truncated.png", lambda claiming: png(2)[:80], "truncated.png: the image file is corrupt"),
        ("notes.png", lambda claiming: b"just some text\n" * 20, "notes.png: not a readable"),
        ("bomb.png", lambda claiming: claiming(20_000, 20_000), "bomb.png: the image is too large"),
    ],
)
def test_a_bad_upload_is_named_and_the_batch_and_picks_kept(
    generated: Path,
    png_claiming: Callable[[int, int], bytes],
    name: str,
    make: Callable[[Callable[[int, int], bytes]], bytes],
    message: str,
) -> None:
    good = [("a.png", png(0)), ("b.png", png(1))]
    app = select(uploads(open_app(**TUTORIAL), good), keys.SCATTER_CHART, [1])
    before = table(app)
    app = uploads(app, [*good, (name, make(png_claiming))])
    assert message in errors(app)
    assert metrics(app)["Images N"] == "2"
    assert table(app).equals(before)
    assert captioned_indices(app) == [1]
    assert not app.exception


def test_real_photos_upload_at_their_own_size(generated: Path) -> None:
    skimage_data = pytest.importorskip("skimage.data")
    files = []
    for name in ("astronaut", "chelsea", "coffee"):  # 512x512, 451x300, 600x400
        buffer = io.BytesIO()
        Image.fromarray(getattr(skimage_data, name)()).save(buffer, format="PNG")
        files.append((f"{name}.png", buffer.getvalue()))
    app = uploads(open_app(**TUTORIAL), files)
    no_errors(app)
    assert metrics(app)["Images N"] == "3" and list(table(app)["name"]) == [n for n, _ in files]
    app = select(app, keys.SCATTER_CHART, [2])
    no_errors(app)
    assert captioned_indices(app) == [2]


def test_an_animated_gif_gives_its_first_frame_with_a_note(generated: Path) -> None:
    app = uploads(open_app(**TUTORIAL), [("a.png", png(0)), ("moving.gif", animated_gif())])
    no_errors(app)
    assert metrics(app)["Images N"] == "2"
    assert any(
        "animated image(s), only the first frame used: moving.gif" in c.value for c in app.caption
    )
    app = select(app, keys.SCATTER_CHART, [1])
    no_errors(app)
    assert captioned_indices(app) == [1]


def test_typed_indices_with_text_keep_the_picks(generated: Path) -> None:
    app = select(open_app(**TUTORIAL), keys.SCATTER_CHART, [1, 2])
    index_box(app).input("3, 7, x").run()
    assert "'x'" in errors(app)
    assert app.session_state[keys.PICKED] == [1, 2]
    assert captioned_indices(app) == [1, 2]


def test_impossible_batch_sizes_are_explained_and_the_batch_kept(generated: Path) -> None:
    app = open_app(**TUTORIAL)
    size = next(box for box in app.sidebar.number_input if box.label == "Batch size N")
    size.set_value(10).run()
    app = select(app, keys.SCATTER_CHART, [3])
    before = table(app)
    for requested, message in ((0, "too small"), (IMAGES + 1, f"this split has {IMAGES}")):
        size = next(box for box in app.sidebar.number_input if box.label == "Batch size N")
        size.set_value(requested).run()
        assert message in errors(app) and "Keeping 10" in errors(app)
        assert metrics(app)["Images N"] == "10"
        assert table(app).equals(before)
        assert captioned_indices(app) == [3]
        assert not app.exception
