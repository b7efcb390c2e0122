"""The explorer's service layer: data choices, models, devices and the batch table."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gradpick import data, models
from gradpick.errors import DataError, InputError, ModelError
from gradpick.infer import infer
from gradpick.ui import service
from gradpick.ui.config import MAX_WEIGHTS_BYTES, UserModelArgs
from gradpick.ui.service import DataChoice, ModelOption, Upload

ImageFolderFactory = Callable[..., Path]


def _png(seed: int = 0, size: tuple[int, int] = (32, 32)) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (*size[::-1], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def cifar_like(image_folder_factory: ImageFolderFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CIFAR-10-shaped test split of 30 images, found through $GRADPICK_CIFAR10_DIR."""
    root = image_folder_factory(data.CIFAR10_CLASSES, per_class=3, name="cifar/test").parent
    monkeypatch.setenv(data.CIFAR10_DIR_ENV, str(root))
    return root


def test_keys_tell_sources_and_slices_apart() -> None:
    choices = [
        DataChoice(),
        DataChoice(split="train"),
        DataChoice(start=5),
        DataChoice(seed=1),
        DataChoice(kind="folder", folder="/a"),
        DataChoice(kind="upload", size=None, uploads=(Upload("a.png", b"", "id-1"),)),
        DataChoice(kind="upload", size=None, uploads=(Upload("a.png", b"", "id-2"),)),
    ]
    assert len({choice.batch_key for choice in choices}) == len(choices)
    assert DataChoice(start=5).source_key == DataChoice().source_key


def test_the_default_source_reads_the_configured_cifar10_folder(cifar_like: Path) -> None:
    source = service.open_source(DataChoice())
    assert len(source) == 30
    assert source.class_names == data.CIFAR10_CLASSES
    assert service.sorted_by_class(source)
    batch = service.read_batch(source, DataChoice(size=7, seed=3))
    assert list(batch.positions) == data.batch_positions(30, size=7, seed=3)
    assert batch.labels is not None
    assert torch.equal(batch.labels, source.labels()[list(batch.positions)])


def test_folder_choices_need_an_existing_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="Type the path"):
        service.open_source(DataChoice(kind="folder", folder="  "))
    with pytest.raises(DataError, match="no such folder"):
        service.open_source(DataChoice(kind="folder", folder=str(tmp_path / "missing")))


def test_uploads_are_decoded_and_bad_files_named() -> None:
    good = Upload("cat.png", _png(), "1")
    source = service.open_source(DataChoice(kind="upload", size=None, uploads=(good,)))
    assert len(source) == 1 and source.labels() is None
    assert not service.sorted_by_class(source)
    corrupt = Upload("notes.png", b"this is text, not a PNG", "2")
    with pytest.raises(DataError, match="notes.png"):
        service.open_source(DataChoice(kind="upload", size=None, uploads=(good, corrupt)))


def test_without_shipped_weights_every_model_is_a_labelled_random_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path))
    options = service.model_options()
    assert [option.name for option in options] == list(models.ARCHITECTURES)
    assert all("random weights" in option.label for option in options)
    first = service.load_model(options[0], torch.device("cpu"))
    again = service.load_model(options[0], torch.device("cpu"))
    assert not first.training
    assert not any(parameter.requires_grad for parameter in first.parameters())
    for left, right in zip(first.state_dict().values(), again.state_dict().values(), strict=True):
        assert torch.equal(left, right)


def test_shipped_weights_come_first_with_their_card_accuracy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path))
    torch.save(models.build("tutorial").state_dict(), tmp_path / "tutorial.pt")
    card = {"test_accuracy": 0.6558, "sha256": "abc123"}
    (tmp_path / "tutorial.json").write_text(json.dumps(card))
    options = service.model_options()
    assert options[0] == ModelOption("tutorial", card, shipped=True)
    assert options[0].label == "tutorial · 65.6% test accuracy"
    assert options[0].identity == "tutorial:abc123"
    assert not options[1].shipped
    model = service.load_model(options[0], torch.device("cpu"))
    assert not model.training


def test_device_options_offer_auto_and_say_why_a_device_is_missing() -> None:
    options = {option.kind: option for option in service.device_options()}
    assert list(options) == ["auto", "cuda", "mps", "cpu"]
    assert options["cpu"].reason is None and options["auto"].label == "auto"
    for option in options.values():
        assert (option.reason is None) == ("unavailable" not in option.label)


def test_batch_table_and_titles_follow_the_inference_result(
    cifar_like: Path, tiny_cnn: torch.nn.Module
) -> None:
    source = service.open_source(DataChoice())
    batch = service.read_batch(source, DataChoice(size=12))
    result = infer(tiny_cnn, batch.images, batch.labels)
    table = service.batch_table(batch, result)
    assert list(table["index"]) == list(range(12))
    assert list(table["correct"]) == result.correct.tolist()
    names = batch.class_names
    assert list(table["predicted"]) == [names[p] for p in result.predictions.tolist()]
    titles = service.describe_indices(batch, result, [4, 0])
    for title, index in zip(titles, [4, 0], strict=True):
        assert title.startswith(f"#{index} {names[int(batch.labels[index])]}→")
        assert title.endswith("✓" if result.correct[index] else "✗")


def test_fit_classes_drops_labels_that_do_not_match_the_model(
    image_folder_factory: ImageFolderFactory, tiny_cnn: torch.nn.Module
) -> None:
    source = data.image_folder(image_folder_factory(classes=3, per_class=2))
    batch = data.load_batch(source)
    assert service.output_count(tiny_cnn, torch.device("cpu")) == 10
    fitted, note = service.fit_classes(batch, 10)
    assert fitted.labels is None and fitted.class_names == data.CIFAR10_CLASSES
    assert note is not None and "3 classes" in note
    assert service.fit_classes(batch, 3) == (batch, None)


def test_an_oversized_upload_is_refused_before_decoding(
    png_claiming: Callable[[int, int], bytes],
) -> None:
    bomb = Upload("huge.png", png_claiming(10000, 5000), "bomb")
    with pytest.raises(DataError, match=r"huge.png: 10000x5000 pixels is too large"):
        service.open_source(DataChoice(kind="upload", size=None, uploads=(bomb,)))


def test_uploads_are_named_by_their_content() -> None:
    first, again = Upload.of("a.png", _png()), Upload.of("a.png", _png())
    assert first.identity == again.identity
    assert Upload.of("b.png", _png()).identity != first.identity
    assert Upload.of("a.png", _png(seed=1)).identity != first.identity


def test_screening_keeps_the_usable_uploads_and_names_each_problem(
    png_claiming: Callable[[int, int], bytes],
) -> None:
    good = [Upload.of(f"{index}.png", _png(seed=index)) for index in range(3)]
    bad = [
        Upload.of("truncated.png", _png()[:60]),
        Upload.of("notes.png", b"this is text, not a PNG"),
        Upload.of("bomb.png", png_claiming(20_000, 20_000)),
    ]
    usable, problems = service.screen_uploads([good[0], *bad, *good[1:]])
    assert usable == tuple(good)
    assert [problem.split(":")[0] for problem in problems] == [
        "truncated.png",
        "notes.png",
        "bomb.png",
    ]
    limit = max(len(upload.data) for upload in good)
    big = Upload.of("big.png", good[0].data + bytes(limit))
    usable, problems = service.screen_uploads([big, *good], max_files=3, max_bytes=limit)
    assert usable == tuple(good[:2])
    assert "at most 3 images" in problems[0] and "first 3 of 4" in problems[0]
    assert problems[1].startswith("big.png:") and "per image" in problems[1]


@pytest.mark.parametrize(
    ("requested", "cap", "message"),
    [(0, None, "too small"), (-5, None, "too small"), (31, None, "30 images"), (21, 20, "cap")],
)
def test_impossible_batch_sizes_are_explained(
    requested: int, cap: int | None, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        service.check_batch_size(requested, 30, cap)


def test_possible_batch_sizes_pass() -> None:
    assert service.check_batch_size(1, 30) == 1
    assert service.check_batch_size(30, 30) == 30
    assert service.check_batch_size(20, 30, cap=20) == 20


def test_class_names_from_a_file_name_the_outputs(
    image_folder_factory: Callable[..., Path],
) -> None:
    batch = data.load_batch(data.image_folder(image_folder_factory(classes=3, per_class=1)))
    names = ("x", "y", "z")
    fitted, note = service.fit_classes(batch, 3, names)
    assert note is None and fitted.class_names == names
    assert fitted.labels is not None and torch.equal(fitted.labels, batch.labels)
    fitted, note = service.fit_classes(batch, 4, ("a", "b", "c", "d"))
    assert fitted.labels is None and note is not None
    with pytest.raises(ModelError, match="lists 3 names but the model predicts 4"):
        service.fit_classes(batch, 4, names)


def test_a_user_model_option_checks_its_files_first(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such weights file"):
        service.user_model_option(UserModelArgs("m:f", weights=str(tmp_path / "none.pt")))
    with pytest.raises(DataError, match="cannot read class names"):
        service.user_model_option(UserModelArgs("m:f", classes=str(tmp_path / "none.txt")))
    weights = tmp_path / "w.pt"
    torch.save({}, weights)
    option = service.user_model_option(UserModelArgs("m:f", weights=str(weights)))
    assert option.label == "Your model: m:f"
    assert option.identity == f"user:m:f:{weights}@{weights.stat().st_mtime}"


def test_uploaded_weights_are_keyed_by_content_and_size_limited() -> None:
    tutorial = ModelOption("tutorial")
    upload = Upload.of("w.pt", b"1234")
    option = service.uploaded_weights_option(tutorial, upload)
    assert option.identity == f"tutorial:{'upload-' + upload.identity}"
    assert "your uploaded weights (w.pt)" in option.label
    huge = Upload("big.pt", bytes(MAX_WEIGHTS_BYTES + 1), "big")
    with pytest.raises(ModelError, match="too large"):
        service.uploaded_weights_option(tutorial, huge)


def test_option_named_keeps_the_served_architecture_and_else_finds_the_built_in() -> None:
    served = ModelOption("resnet20", upload=Upload("mine.pt", b"weights", "abc"))
    assert service.option_named("resnet20", served) is served
    other = service.option_named("resnet20", ModelOption("tutorial"))
    assert other.name == "resnet20" and other.upload is None


def test_scatter_values_are_losses_or_the_entropy_without_labels(tiny_cnn) -> None:
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([0, 1, 2, 3, 4, 5])
    labelled = infer(tiny_cnn, images, labels)
    values, label = service.scatter_values(labelled)
    assert label == "loss on the true label" and values.tolist() == labelled.losses.tolist()
    unlabelled = infer(tiny_cnn, images)
    values, label = service.scatter_values(unlabelled)
    assert "entropy" in label
    np.testing.assert_allclose(values, unlabelled.entropies.numpy())


def test_export_records_name_the_weights_and_the_batch() -> None:
    card = {"sha256": "f" * 64, "test_accuracy": 0.9}
    shipped = service.model_record(ModelOption("resnet20", card, shipped=True))
    assert shipped["weights_sha256"] == shipped["card_sha256"] == "f" * 64
    assert shipped["card_test_accuracy"] == 0.9
    assert service.model_record(ModelOption("tutorial"))["weights_sha256"] is None
    batch = data.ImageBatch(
        torch.zeros(3, 3, 32, 32, dtype=torch.uint8), None, ("a",), ("x", "y", "z"), (4, 5, 6), "s"
    )
    sliced = service.source_record(DataChoice(split="train", start=4, size=3), batch)
    assert (sliced["split"], sliced["start"], sliced["size"], sliced["N"]) == ("train", 4, 3, 3)
    uploaded = service.source_record(DataChoice(kind="upload", size=None), batch)
    assert uploaded["split"] is None and uploaded["N"] == 3
