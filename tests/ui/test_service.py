"""The explorer's service layer: data choices, models, devices and the batch table."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from gradpick import data
from gradpick.errors import DataError, DownloadError, InputError, ModelError
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.outputs.inference import infer
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


def test_a_hosted_page_names_cifar10_instead_of_its_folder(cifar_like: Path) -> None:
    local = service.open_source(DataChoice())
    assert str(cifar_like) in local.description
    hosted = service.open_source(DataChoice(hosted=True))
    assert hosted.description == "CIFAR-10, test split"
    assert DataChoice(hosted=True).source_key != DataChoice().source_key
    batch = service.read_batch(hosted, DataChoice(size=5, hosted=True))
    assert batch.source == "CIFAR-10, test split"
    assert DataChoice(split="train", hosted=True).public_name == "CIFAR-10, train split"


def test_hosted_data_errors_name_the_data_not_the_server_paths(
    cifar_like: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosted = DataChoice(hosted=True)
    source = service.open_source(hosted)
    assert isinstance(source, data.FolderSource)
    first = source.files[0]
    first.write_bytes(b"not a JPEG")
    # an unreadable file is skipped and listed by its name in the source, never by its path
    for hosted_batch in (False, True):
        batch = service.read_batch(source, DataChoice(size=3, hosted=hosted_batch))
        (note,) = batch.notes
        assert len(batch) == 2 and source.names([0])[0] in note
        assert str(cifar_like) not in note
    first.unlink()
    (note,) = service.read_batch(source, DataChoice(size=3, hosted=True)).notes
    assert "cannot be read" in note and str(cifar_like) not in note
    monkeypatch.setenv(data.CIFAR10_DIR_ENV, str(cifar_like / "missing"))
    with pytest.raises(DataError, match="no such folder"):
        service.open_source(DataChoice())
    with pytest.raises(DataError, match="CIFAR-10, test split") as raised:
        service.open_source(hosted)
    assert str(cifar_like) not in str(raised.value)


def test_a_failed_hosted_download_stays_a_download_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def offline(split: str, progress: object = None, spec: object = None) -> data.ImageSource:
        raise DownloadError(f"Could not download CIFAR-10 into {tmp_path} (offline).")

    monkeypatch.setattr(data, "default_cifar10", offline)
    with pytest.raises(DownloadError) as raised:
        service.open_source(DataChoice(hosted=True))
    assert str(raised.value).startswith("CIFAR-10, test split: the images could not be downloaded")
    assert str(tmp_path) not in str(raised.value)


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
    first = service.load_model(options[0], torch.device("cpu")).module
    again = service.load_model(options[0], torch.device("cpu")).module
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
    loaded = service.load_model(options[0], torch.device("cpu"))
    assert not loaded.module.training and loaded.card == card and loaded.spec.size == (32, 32)


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
    page = service.batch_table(batch, result, range(5, 9))  # a page keeps its images' indices
    assert list(page["index"]) == [5, 6, 7, 8]
    assert page.drop(columns="index").equals(
        table.iloc[5:9].drop(columns="index").reset_index(drop=True)
    )
    titles = service.describe_indices(batch, result, [4, 0])
    for title, index in zip(titles, [4, 0], strict=True):
        assert title.startswith(f"#{index} {names[int(batch.labels[index])]}→")
        assert title.endswith("✓" if result.correct[index] else "✗")
        assert f"({float(result.confidences[index]):.0%})" in title


def test_hover_lines_read_as_a_list_of_every_images_title(
    cifar_like: Path, tiny_cnn: torch.nn.Module
) -> None:
    batch = service.read_batch(service.open_source(DataChoice()), DataChoice(size=12))
    result = infer(tiny_cnn, batch.images, batch.labels)
    lines = service.HoverLines(batch, result)
    every = service.describe_indices(batch, result, range(12))
    assert len(lines) == 12 and list(lines) == every
    assert lines[2:9:3] == every[2:9:3] and lines[-1] == every[11]
    with pytest.raises(IndexError):
        lines[12]
    names, predicted = batch.class_names, int(result.predictions[3])
    unlabelled = replace(result, labels=None, losses=None)
    confidence = f"{float(result.confidences[3]):.0%}"
    assert service.HoverLines(batch, unlabelled)[3] == f"#3 {names[predicted]} ({confidence})"


def test_fit_classes_drops_labels_that_do_not_match_the_model(
    image_folder_factory: ImageFolderFactory,
) -> None:
    source = data.image_folder(image_folder_factory(classes=3, per_class=2))
    batch = data.load_batch(source)
    fitted, note = service.fit_classes(batch, 10)
    assert fitted.labels is None and fitted.class_names == data.CIFAR10_CLASSES
    assert note is not None and "3 classes" in note
    assert service.fit_classes(batch, 3) == (batch, None)
    uploads, note = service.fit_classes(replace(batch, labels=None), 10)
    assert note is None  # no labels to ignore, only the model's names to use
    assert uploads.labels is None and uploads.class_names == data.CIFAR10_CLASSES


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


def test_a_user_model_option_carries_its_input_spec_into_the_model() -> None:
    args = UserModelArgs("torchvision:resnet18", input_size="32", mean=(0.5,) * 3, std=(0.25,) * 3)
    option = service.user_model_option(args)
    assert option.spec_overrides == {"input_size": "32", "mean": (0.5,) * 3, "std": (0.25,) * 3}
    plain = service.user_model_option(UserModelArgs("torchvision:resnet18", input_size="32"))
    assert option.identity != plain.identity
    model = service.load_model(option, torch.device("cpu")).module
    assert isinstance(model, zoo.Normalized) and not model.training
    assert torch.equal(model.normalize.mean.flatten(), torch.full((3,), 0.5))
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 1000)


def test_spec_text_from_the_sidebar_is_read_or_explained() -> None:
    option = service.user_model_option(UserModelArgs("torchvision:resnet18"))
    typed = service.with_spec_text(option, " 64x48 ", "72", "0.5 0.5 0.5", "0.2, 0.2,0.2")
    assert (typed.input_size, typed.resize) == ("64x48", 72)
    assert typed.mean == (0.5,) * 3 and typed.std == (0.2,) * 3
    assert service.with_spec_text(option, "", "", "", "") == option
    with pytest.raises(InputError, match="Resize 'big' is not a whole number"):
        service.with_spec_text(option, "", "big", "", "")
    with pytest.raises(InputError, match="Mean 'a, b' is not a list of numbers"):
        service.with_spec_text(option, "", "", "a, b", "")


def test_uploaded_safetensors_weights_are_read(tmp_path: Path) -> None:
    state = models.build("tutorial").state_dict()
    path = tmp_path / "w.safetensors"
    save_file(state, path)
    option = service.uploaded_weights_option(
        ModelOption("tutorial"), Upload.of(path.name, path.read_bytes())
    )
    loaded = service.load_model(option, torch.device("cpu"))
    assert loaded.weights == "upload" and loaded.weights_sha256 == models.sha256_file(path)
    assert all(torch.equal(v, state[k]) for k, v in loaded.module.state_dict().items())


def test_your_model_takes_its_class_names_from_its_weights_unless_given() -> None:
    option = service.user_model_option(UserModelArgs("torchvision:resnet18", input_size="32"))
    loaded = service.load_model(option, torch.device("cpu"))
    imagenet = replace(loaded, spec=replace(loaded.spec, class_names=("tench",) * 1000))
    assert service.named_outputs(option, imagenet).class_names == ("tench",) * 1000
    assert service.named_outputs(option, loaded) == option  # random weights name nothing
    given = replace(option, class_names=("x",) * 1000)
    assert service.named_outputs(given, imagenet).class_names == ("x",) * 1000
    built_in = service.model_options()[0]
    assert service.named_outputs(built_in, imagenet) is built_in


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
    option = next(o for o in service.model_options() if o.name == "resnet20")
    assert option.card is not None
    shipped = service.load_model(option, torch.device("cpu")).identity()
    assert shipped["weights_sha256"] == shipped["card_sha256"] == option.card["sha256"]
    assert shipped["card_test_accuracy"] == option.card["test_accuracy"]
    assert shipped["input_spec"]["size"] == [32, 32]
    pixels = torch.zeros(3, 3, 32, 32, dtype=torch.uint8)
    batch = data.ImageBatch(pixels, None, ("a",), ("x", "y", "z"), (4, 5, 6), "s", split="train")
    sliced = service.source_record(DataChoice(split="train", start=4, size=3), batch)
    assert (sliced["split"], sliced["start"], sliced["size"], sliced["N"]) == ("train", 4, 3, 3)
    uploaded = service.source_record(DataChoice(kind="upload", size=None), batch)
    assert uploaded["split"] is None and uploaded["N"] == 3
    plain = replace(batch, split=None)  # read from a folder without train/ and test/
    assert service.source_record(DataChoice(kind="folder", split="test"), plain)["split"] is None


@pytest.mark.parametrize(
    ("labels", "cap", "expected"),
    [
        ([0, 0, 1, 1, 2, 2], None, {"seed": 0, "start": 0, "size": 6}),  # by class: a sample
        ([2, 0, 1, 0, 2, 1], None, {"seed": None, "start": 0, "size": 6}),  # mixed: the first
        ([2, 0, 1, 0, 2, 1], 4, {"seed": None, "start": 0, "size": 4}),  # a hosted cap
    ],
)
def test_the_default_batch_is_a_sample_of_a_class_sorted_source_and_else_its_start(
    labels: list[int], cap: int | None, expected: dict[str, int | None]
) -> None:
    images = torch.zeros(len(labels), 3, 32, 32, dtype=torch.uint8)
    source = data.ArraySource(images, torch.tensor(labels), data.CIFAR10_CLASSES, "six images")
    base = service.DataChoice(size=None)
    chosen = service.default_batch(base, source, cap)
    assert {"seed": chosen.seed, "start": chosen.start, "size": chosen.size} == expected
    assert (chosen.kind, chosen.split) == (base.kind, base.split)
