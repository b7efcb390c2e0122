"""Training runs end to end on a tiny generated folder, checkpoints, resumes and evaluates."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from gradpick.data import CIFAR10_CLASSES, ArraySource, image_folder, load_batch
from gradpick.errors import DataError, ModelError
from gradpick.models import shipped as models
from gradpick.models import training as train
from gradpick.models import weights as weights_io
from gradpick.models.training import TrainConfig, augment_batch, evaluate
from gradpick.outputs.inference import infer

TINY = TrainConfig("tutorial", epochs=2, batch_size=16, compile=False)


@pytest.fixture
def ten_classes(
    image_folder_factory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Any:
    """A CIFAR-shaped folder of 40 generated 32x32 images, with the decoded cache in tmp."""
    monkeypatch.setenv("GRADPICK_CACHE_DIR", str(tmp_path / "cache"))
    return image_folder(image_folder_factory(classes=list(CIFAR10_CLASSES), per_class=4))


def run(config: TrainConfig, source: Any, run_dir: Path, resume: bool = False) -> Any:
    messages: list[str] = []
    model = train.train(config, source, run_dir, resume=resume, device="cpu", log=messages.append)
    return model, messages


def test_a_tiny_run_trains_checkpoints_and_writes_history(ten_classes: Any, tmp_path: Path) -> None:
    model, _ = run(TINY, ten_classes, tmp_path / "run")

    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert all(torch.isfinite(value).all() for value in model.state_dict().values())
    history = json.loads((tmp_path / "run" / "history.json").read_text())
    assert [entry["epoch"] for entry in history] == [1, 2]
    assert all({"loss", "train_accuracy", "seconds"} <= set(entry) for entry in history)
    checkpoint = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert checkpoint["epoch"] == 2
    assert checkpoint["config"] == train.asdict(TINY)
    for key, value in model.state_dict().items():
        assert torch.equal(checkpoint["model"][key], value), key
    assert list((tmp_path / "cache" / "decoded").glob("*.pt")), "decoded once into the cache"


@pytest.mark.parametrize("swa", [False, True], ids=["one-cycle", "swa"])
def test_an_interrupted_run_resumes_where_it_stopped_and_matches_a_straight_run(
    ten_classes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swa: bool
) -> None:
    config = TrainConfig("tutorial", epochs=3, batch_size=16, compile=False, swa=swa)
    straight, _ = run(config, ten_classes, tmp_path / "straight")

    real_epoch = train._train_epoch

    def interrupted(*args: Any, **kwargs: Any) -> dict[str, float]:
        if args[7] == 2:  # the third epoch: the machine goes down mid-run
            raise KeyboardInterrupt
        return real_epoch(*args, **kwargs)

    monkeypatch.setattr(train, "_train_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(config, ten_classes, tmp_path / "resumed")
    stored = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert stored["epoch"] == 2  # only the interrupted epoch is lost
    monkeypatch.setattr(train, "_train_epoch", real_epoch)

    resumed, messages = run(config, ten_classes, tmp_path / "resumed", resume=True)

    assert any("resuming tutorial after epoch 2 of 3" in message for message in messages)
    history = json.loads((tmp_path / "resumed" / "history.json").read_text())
    assert [entry["epoch"] for entry in history] == [1, 2, 3]
    for key, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[key], value), key


def test_a_warm_start_begins_from_those_weights_and_checks_their_checksum(
    ten_classes: Any, tmp_path: Path
) -> None:
    first, _ = run(TINY, ten_classes, tmp_path / "first")
    weights = tmp_path / "first.pt"
    torch.save(first.state_dict(), weights)
    config = replace(TINY, max_lr=1e-9, warm_start_sha256=models.sha256_file(weights))
    messages: list[str] = []
    second = train.train(
        config,
        ten_classes,
        tmp_path / "second",
        device="cpu",
        log=messages.append,
        warm_start=weights,
    )
    assert any("starting from" in message for message in messages)
    for key, value in first.state_dict().items():  # a negligible learning rate: barely moved
        torch.testing.assert_close(second.state_dict()[key], value, atol=1e-3, rtol=0)
    fresh, _ = run(replace(TINY, max_lr=1e-9), ten_classes, tmp_path / "fresh")
    assert any(
        not torch.allclose(fresh.state_dict()[key], value, atol=1e-3)
        for key, value in first.state_dict().items()
    ), "without the warm start the run would begin elsewhere"
    wrong = replace(config, warm_start_sha256="0" * 64)
    with pytest.raises(ModelError, match="sha256 differs"):
        train.train(wrong, ten_classes, tmp_path / "third", device="cpu", warm_start=weights)


def test_swa_returns_the_mean_of_every_epochs_weights_with_batchnorm_recomputed(
    ten_classes: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = TrainConfig("resnet20", epochs=3, batch_size=16, max_lr=0.05, compile=False, swa=True)
    snapshots: list[dict[str, torch.Tensor]] = []
    real_epoch = train._train_epoch

    def recording(*args: Any, **kwargs: Any) -> dict[str, float]:
        stats = real_epoch(*args, **kwargs)
        snapshots.append({name: p.detach().clone() for name, p in args[0].named_parameters()})
        return stats

    monkeypatch.setattr(train, "_train_epoch", recording)
    model, messages = run(config, ten_classes, tmp_path / "run")

    assert len(snapshots) == 3 and any("BatchNorm" in message for message in messages)
    assert not torch.equal(snapshots[0]["fc.weight"], snapshots[2]["fc.weight"])
    for name, parameter in model.named_parameters():
        expected = torch.stack([snapshot[name] for snapshot in snapshots]).mean(0)
        torch.testing.assert_close(parameter, expected, msg=name)
    # The first BatchNorm's statistics: the mean over one more training-like pass of its input.
    batches = train._training_batches(load_batch(ten_classes), config, epoch=config.epochs)
    with torch.no_grad():
        inputs = [model.conv1(model.normalize(images.float() / 255.0)) for images, _ in batches]
    torch.testing.assert_close(
        model.bn1.running_mean, torch.stack([x.mean((0, 2, 3)) for x in inputs]).mean(0)
    )
    torch.testing.assert_close(
        model.bn1.running_var, torch.stack([x.var((0, 2, 3)) for x in inputs]).mean(0)
    )


def test_recomputed_batchnorm_sees_every_class_of_a_source_sorted_by_class() -> None:
    # Class c is a flat grey of brightness 25c: batches in folder order would hold one or two
    # classes and miss nearly all of the variance, which lies between classes.
    labels = torch.arange(10).repeat_interleave(8)
    images = (labels * 25).view(-1, 1, 1, 1).expand(-1, 3, 32, 32).to(torch.uint8)
    source = ArraySource(images, labels, CIFAR10_CLASSES, "sorted greys")
    model = models.build("resnet20")
    config = TrainConfig("resnet20", epochs=1, batch_size=16, augment=False)
    train._recompute_batchnorm(model, load_batch(source), config, torch.device("cpu"))

    with torch.no_grad():
        everything = model.conv1(model.normalize(images.float() / 255.0)).var((0, 2, 3))
    assert (model.bn1.running_var > 0.7 * everything).all()


def test_a_checkpoint_from_before_a_setting_existed_still_resumes(
    ten_classes: Any, tmp_path: Path
) -> None:
    run(TINY, ten_classes, tmp_path / "run")
    path = tmp_path / "run" / "checkpoint.pt"
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["config"]["swa"], checkpoint["average"]
    torch.save(checkpoint, path)

    _, messages = run(TINY, ten_classes, tmp_path / "run", resume=True)
    assert any("resuming tutorial after epoch 2 of 2" in message for message in messages)


def test_resume_without_a_checkpoint_starts_from_scratch(ten_classes: Any, tmp_path: Path) -> None:
    _, messages = run(TINY, ten_classes, tmp_path / "fresh", resume=True)
    assert any("no checkpoint" in message for message in messages)
    assert len(json.loads((tmp_path / "fresh" / "history.json").read_text())) == 2


def test_a_resumed_warm_start_says_what_it_starts_from(ten_classes: Any, tmp_path: Path) -> None:
    first, _ = run(TINY, ten_classes, tmp_path / "first")
    weights = tmp_path / "first.pt"
    torch.save(first.state_dict(), weights)
    config = replace(TINY, warm_start_sha256=weights_io.sha256_file(weights))

    def resumed(run_dir: Path) -> list[str]:
        messages: list[str] = []
        train.train(config, ten_classes, run_dir, True, "cpu", messages.append, warm_start=weights)
        return messages

    begun = resumed(tmp_path / "second")
    assert f"no checkpoint in {tmp_path / 'second'}; warm-starting from {weights}" in begun
    again = resumed(tmp_path / "second")
    assert f"resuming tutorial after epoch 2 of 2 (warm-started from {weights})" in again
    assert not any("scratch" in message for message in begun + again)


def test_resuming_with_other_settings_is_refused(ten_classes: Any, tmp_path: Path) -> None:
    run(TINY, ten_classes, tmp_path / "run")
    other = TrainConfig("tutorial", epochs=2, batch_size=8, compile=False)
    with pytest.raises(ModelError, match="different settings"):
        run(other, ten_classes, tmp_path / "run", resume=True)


def test_a_corrupt_checkpoint_is_a_model_error(ten_classes: Any, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"half a checkpoint")
    with pytest.raises(ModelError, match="checkpoint is corrupt or unreadable"):
        run(TINY, ten_classes, tmp_path / "run", resume=True)


def test_a_source_with_the_wrong_class_count_is_refused(
    image_folder_factory: Callable[..., Path], tmp_path: Path
) -> None:
    source = image_folder(image_folder_factory(classes=3, per_class=2))
    with pytest.raises(DataError, match="3 classes found.*predict 10"):
        run(TINY, source, tmp_path / "run")


def test_images_that_are_not_32px_are_refused(
    image_folder_factory: Callable[..., Path], tmp_path: Path
) -> None:
    root = image_folder_factory(classes=list(CIFAR10_CLASSES), per_class=1, size=(40, 40))
    with pytest.raises(DataError, match="40x40 pixels; training expects 32x32"):
        run(TINY, image_folder(root), tmp_path / "run")


def test_evaluation_figures_agree_with_each_other(ten_classes: Any) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = train.models.freeze(train.models.build("tutorial"))
    batch = load_batch(ten_classes)
    evaluation = evaluate(model, batch)

    predictions = infer(model, batch.images).predictions
    assert batch.labels is not None
    confusion = torch.tensor(evaluation.confusion)
    assert confusion.shape == (10, 10) and int(confusion.sum()) == evaluation.images == 40
    for true, predicted in zip(batch.labels.tolist(), predictions.tolist(), strict=True):
        assert confusion[true, predicted] > 0
    assert evaluation.accuracy == pytest.approx(float(confusion.trace()) / 40)
    assert evaluation.accuracy == pytest.approx(float((predictions == batch.labels).float().mean()))
    for index, name in enumerate(CIFAR10_CLASSES):
        row = confusion[index]
        assert evaluation.per_class[name] == pytest.approx(float(row[index] / row.sum()))
    assert f"{evaluation.accuracy:.2%}" in evaluation.table()


def test_evaluation_needs_labels(ten_classes: Any) -> None:
    batch = load_batch(ten_classes)
    unlabelled = type(batch)(**{**batch.__dict__, "labels": None})
    with pytest.raises(DataError, match="labelled images"):
        evaluate(train.models.build("tutorial"), unlabelled)


def test_augment_batch_crops_the_padded_image_and_may_flip_it() -> None:
    images = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    augmented = augment_batch(images, torch.Generator().manual_seed(3))

    assert augmented.shape == images.shape and augmented.dtype == torch.uint8
    again = augment_batch(images, torch.Generator().manual_seed(3))
    assert torch.equal(augmented, again)
    padded = F.pad(images, (4, 4, 4, 4))
    for image, original in zip(augmented, padded, strict=True):
        crops = [
            candidate
            for y in range(9)
            for x in range(9)
            for crop in [original[:, y : y + 32, x : x + 32]]
            for candidate in (crop, crop.flip(-1))
        ]
        assert any(torch.equal(image, crop) for crop in crops)


def test_cutout_erases_one_square_per_image_after_the_same_crops_and_flips() -> None:
    images = torch.randint(1, 256, (12, 3, 32, 32), dtype=torch.uint8)  # no zero pixels
    plain = augment_batch(images, torch.Generator().manual_seed(5))
    cut = augment_batch(images, torch.Generator().manual_seed(5), cutout=8)

    erased = (cut != plain).any(1)
    assert (cut[(cut != plain)] == 0).all(), "cutout only ever zeroes pixels"
    for mask in erased:
        rows, columns = mask.any(1).nonzero(), mask.any(0).nonzero()
        if len(rows):
            assert rows.max() - rows.min() < 8 and columns.max() - columns.min() < 8
    assert int(erased.sum((1, 2)).max()) == 64, "a square inside the image is erased whole"


@pytest.fixture
def two_teachers(tmp_path: Path) -> list[Path]:
    paths = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        paths.append(tmp_path / f"teacher{seed}.pt")
        torch.save(models.build("tutorial").state_dict(), paths[-1])
    return paths


def test_teacher_probabilities_are_the_mean_softmax_over_each_image_and_its_mirror(
    ten_classes: Any, two_teachers: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = load_batch(ten_classes)
    device = torch.device("cpu")
    probabilities = train.teacher_probabilities("tutorial", two_teachers, batch, tmp_path, device)

    inputs = batch.images.float() / 255.0
    expected = torch.zeros(len(batch), 10)
    for path in two_teachers:
        teacher = models.load("tutorial", path)
        expected += (teacher(inputs).softmax(1) + teacher(inputs.flip(-1)).softmax(1)) / 4
    torch.testing.assert_close(probabilities, expected)
    assert torch.allclose(probabilities.sum(1), torch.ones(len(batch)))

    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the kept probabilities should have been reused")

    monkeypatch.setattr(models, "load", no_loading)  # a resume reads them back
    again = train.teacher_probabilities("tutorial", two_teachers, batch, tmp_path, device)
    assert torch.equal(again, probabilities)
    with pytest.raises(AssertionError, match="reused"):  # other teachers: computed afresh
        train.teacher_probabilities("tutorial", two_teachers[:1], batch, tmp_path, device)
    reordered = type(batch)(**{**batch.__dict__, "images": batch.images.flip(0)})
    with pytest.raises(AssertionError, match="reused"):  # other images: computed afresh
        train.teacher_probabilities("tutorial", two_teachers, reordered, tmp_path, device)


def test_distillation_targets_mix_the_labels_with_the_teachers(
    ten_classes: Any, two_teachers: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha256s = tuple(models.sha256_file(path) for path in two_teachers)
    config = replace(TINY, epochs=1, batch_size=8, teachers=sha256s, distill_weight=0.25)
    seen: list[torch.Tensor] = []
    real_epoch = train._train_epoch

    def recording(*args: Any, **kwargs: Any) -> dict[str, float]:
        seen.append(args[3])
        return real_epoch(*args, **kwargs)

    monkeypatch.setattr(train, "_train_epoch", recording)
    model = train.train(config, ten_classes, tmp_path / "run", device="cpu", teachers=two_teachers)

    batch = load_batch(ten_classes)
    assert batch.labels is not None
    taught = train.teacher_probabilities(
        "tutorial", two_teachers, batch, tmp_path / "run", torch.device("cpu")
    )
    expected = 0.75 * F.one_hot(batch.labels, 10).float() + 0.25 * taught
    torch.testing.assert_close(seen[0], expected)
    assert all(torch.isfinite(value).all() for value in model.state_dict().values())
    with pytest.raises(ModelError, match="teachers' sha256s differ"):
        train.train(config, ten_classes, tmp_path / "other", teachers=two_teachers[::-1])

    def no_teachers(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a finished run has no epoch left to teach")

    (tmp_path / "run" / "teacher_probabilities.pt").unlink()  # as on a fresh checkout
    monkeypatch.setattr(train, "teacher_probabilities", no_teachers)
    exported = train.train(
        config, ten_classes, tmp_path / "run", resume=True, device="cpu", teachers=two_teachers
    )
    for key, value in model.state_dict().items():
        assert torch.equal(exported.state_dict()[key], value), key


@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is for machines without a GPU")
def test_compiling_on_a_machine_without_a_gpu_prints_no_cuda_warning(tmp_path: Path) -> None:
    """A CUDA toolkit on disk (``CUDA_HOME``) but no GPU: the compiler's import otherwise warns
    "No CUDA runtime is found", though a CPU run never needs CUDA."""
    code = (
        "import torch\n"
        "from gradpick.models import training as train\n"
        "step = train.compiled(torch.nn.Linear(2, 2))\n"
        "assert step(torch.ones(1, 2)).shape == (1, 2)\n"
    )
    env = {**os.environ, "CUDA_HOME": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(train.__file__).parents[2]), env.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "CUDA" not in done.stderr, done.stderr
