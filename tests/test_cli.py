"""The command line: infer, grads and bench on a generated image folder with a tiny weights file."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from gradpick import data, models
from gradpick.cli import main
from gradpick.gradients import input_gradients

FOLDER_IMAGES = 12  # 3 classes x 4 images


@pytest.fixture
def folder(image_folder_factory) -> Path:
    return image_folder_factory(classes=3, per_class=4)


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        state = models.build("tutorial").state_dict()
    path = tmp_path / "tutorial.pt"
    torch.save(state, path)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def model_arguments(folder: Path, weights: Path) -> list[str]:
    return ["--data", str(folder), "--model", "tutorial", "--weights", str(weights)]


def direct_gradients(folder: Path, weights: Path, indices: list[int], **options: object):
    batch = data.load_batch(data.image_folder(folder))
    model = models.load("tutorial", weights)
    return input_gradients(model, batch.float_images(), indices, batch.labels, **options)


def test_infer_prints_accuracy_and_throughput(capsys, folder, weights):
    status, out, _ = run(capsys, "infer", *model_arguments(folder, weights))
    assert status == 0
    batch = data.load_batch(data.image_folder(folder))
    logits = models.load("tutorial", weights)(batch.float_images())
    correct = int((logits.argmax(dim=1) == batch.labels).sum())
    assert f"tutorial (weights {weights})" in out
    assert f"a batch of {FOLDER_IMAGES} of the {FOLDER_IMAGES} images" in out
    assert f"({correct} of {FOLDER_IMAGES})" in out
    assert "images/s" in out


def test_infer_takes_a_seeded_sample(capsys, folder, weights):
    status, out, _ = run(
        capsys, "infer", *model_arguments(folder, weights), "--size", "5", "--seed", "3"
    )
    assert status == 0
    assert "a batch of 5 of the 12 images" in out and "seed 3" in out
    assert "of 5)" in out


def test_grads_pt_equals_input_gradients_and_has_a_sidecar(capsys, folder, weights, tmp_path):
    out_file = tmp_path / "grads.pt"
    status, out, _ = run(
        capsys,
        "grads",
        *model_arguments(folder, weights),
        "--indices",
        "3, 7, 1-2",
        "--measure-memory",
        "--out",
        str(out_file),
    )
    assert status == 0, out
    saved = torch.load(out_file, weights_only=True)
    expected = direct_gradients(folder, weights, [3, 7, 1, 2])
    torch.testing.assert_close(saved["gradients"], expected.gradients, rtol=1e-6, atol=1e-8)
    assert saved["indices"].tolist() == [3, 7, 1, 2]
    torch.testing.assert_close(saved["target_values"], expected.target_values)

    sidecar = json.loads(out_file.with_suffix(".json").read_text())
    assert sidecar["gradients_file"] == "grads.pt"
    assert sidecar["indices"] == [3, 7, 1, 2]
    assert sidecar["shape"] == [4, 3, 32, 32]
    assert sidecar["labels"] == [0, 1, 0, 0]  # images 3, 7, 1, 2 of classes with 4 each
    assert sidecar["classes"] == sidecar["labels"]  # a loss target is its label's class
    assert sidecar["class_names"] == ["class_00", "class_01", "class_00", "class_00"]
    assert sidecar["image_names"][1] == str(Path("class_01") / "0003.png")
    assert sidecar["target_values"] == pytest.approx(expected.target_values.tolist(), rel=1e-5)
    assert (sidecar["target"], sidecar["strategy"], sidecar["reduction"]) == (
        "loss",
        "recompute",
        "sum",
    )
    assert sidecar["device"] == "cpu" and sidecar["timing_ms"] > 0
    memory = sidecar["memory"]
    assert memory["saved_for_backward"]["bytes"] > 0 and memory["saved_for_backward"]["counts"]
    assert memory["peak"]["counts"]
    assert sidecar["model"]["name"] == "tutorial"
    assert sidecar["model"]["weights_sha256"] == models.sha256_file(weights)
    assert sidecar["model"]["card_sha256"] is None  # a custom file has no shipped card
    assert {"gradpick", "torch", "torchvision", "python"} <= set(sidecar["versions"])
    assert "wrote" in out and "saved for backward" in out


def test_grads_npz_with_a_logit_class_by_name(capsys, folder, weights, tmp_path):
    out_file = tmp_path / "grads.npz"
    status, _, _ = run(
        capsys,
        "grads",
        *model_arguments(folder, weights),
        "--indices",
        "11 0",
        "--target",
        "logit",
        "--class",
        "class_01",
        "--strategy",
        "summed",
        "--reduction",
        "mean",
        "--out",
        str(out_file),
    )
    assert status == 0
    arrays = np.load(out_file)
    expected = direct_gradients(
        folder, weights, [11, 0], target="logit", classes=1, strategy="summed", reduction="mean"
    )
    np.testing.assert_allclose(arrays["gradients"], expected.gradients.numpy(), rtol=1e-6)
    assert arrays["classes"].tolist() == [1, 1]
    sidecar = json.loads(out_file.with_suffix(".json").read_text())
    assert sidecar["memory"] is None
    assert (sidecar["strategy"], sidecar["reduction"], sidecar["target"]) == (
        "summed",
        "mean",
        "logit",
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--indices", "3, 7, x"], "'x' is not an index"),
        (["--indices", "12"], "out of range"),
        (["--indices", "0", "--size", "0"], "between 1 and 12"),
        (["--indices", "0", "--size", "13"], "between 1 and 12"),
        (["--indices", "0", "--out", "grads.csv"], ".pt or .npz"),
        (["--indices", "0", "--class", "2"], "--target logit"),
        (["--indices", "0", "--target", "logit", "--class", "dog"], "Unknown class 'dog'"),
    ],
)
def test_grads_bad_input_is_one_clear_line(capsys, folder, weights, extra, message):
    status, out, err = run(capsys, "grads", *model_arguments(folder, weights), *extra)
    assert status == 2
    assert err.startswith("gradpick grads: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_missing_folder_and_wrong_weights_are_clear_errors(capsys, folder, weights, tmp_path):
    status, _, err = run(
        capsys, "infer", *model_arguments(tmp_path / "nowhere", weights), "--size", "1"
    )
    assert status == 2 and "no such folder" in err and err.count("\n") == 1

    resnet = tmp_path / "resnet20.pt"
    torch.save(models.build("resnet20").state_dict(), resnet)
    status, _, err = run(capsys, "infer", *model_arguments(folder, resnet))
    assert status == 2 and "not for the 'tutorial' architecture" in err

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"these are not weights")
    status, _, err = run(capsys, "grads", *model_arguments(folder, corrupt), "--indices", "0")
    assert status == 2 and "not a readable PyTorch weights file" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "command", ["train", "eval", "infer", "grads", "bench", "bench-distributed"]
)
def test_every_subcommand_has_help(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: gradpick {command}")


def test_python_dash_m_gradpick_runs():
    completed = subprocess.run(
        [sys.executable, "-m", "gradpick", "grads", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert "--indices" in completed.stdout


def test_bench_prints_a_table_and_writes_json(capsys, tmp_path):
    json_path = tmp_path / "bench.json"
    status, out, _ = run(
        capsys,
        "bench",
        *("--models", "tutorial", "--n", "4", "--k", "1", "--repeats", "1"),
        *("--json", str(json_path)),
    )
    assert status == 0
    assert "| model | N | k | strategy |" in out and "Verdict:" in out
    written = json.loads(json_path.read_text())
    assert written["config"]["sizes"] == [4] and written["config"]["picks"] == [1]
    assert {row["strategy"] for row in written["rows"]} >= {"floor", "recompute", "vmap"}


def test_train_then_eval_on_a_folder(
    cifar_like_factory: Callable[[int], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole training command: train, export weights and a card, then evaluate them."""
    folder = cifar_like_factory(40)
    export_dir = tmp_path / "assets"
    arguments = ["train", "tutorial", "--data", str(folder), "--epochs", "1"]
    arguments += ["--batch-size", "8", "--no-compile", "--run-dir", str(tmp_path / "run")]
    assert main([*arguments, "--export-dir", str(export_dir)]) == 0
    card = json.loads((export_dir / "tutorial.json").read_text())
    assert card["sha256"] == models.sha256_file(export_dir / "tutorial.pt")
    assert card["evaluated_images"] == 40 and card["epochs"] == 1
    assert card["recipe"]["batch_size"] == 8 and card["recipe"]["compile"] is False
    assert card["hardware"].startswith("cpu;")
    printed = capsys.readouterr().out
    assert f"top-1 accuracy: {card['test_accuracy']:.2%}" in printed
    weights = str(export_dir / "tutorial.pt")
    assert main(["eval", "tutorial", "--weights", weights, "--data", str(folder)]) == 0
    assert f"top-1 accuracy: {card['test_accuracy']:.2%} on 40 images" in capsys.readouterr().out


def test_a_warm_restart_starts_from_the_given_weights_and_keeps_both_cards(
    cifar_like_factory: Callable[[int], Path], tmp_path: Path
) -> None:
    folder = cifar_like_factory(40)
    common = ["--data", str(folder), "--batch-size", "8", "--no-compile"]
    first = ["train", "tutorial", *common, "--epochs", "1", "--run-dir", str(tmp_path / "one")]
    assert main([*first, "--export-dir", str(tmp_path / "first")]) == 0
    started = tmp_path / "first" / "tutorial.pt"
    second = ["train", "tutorial", *common, "--epochs", "2", "--max-lr", "0.01", "--swa"]
    second += ["--warm-start", str(started), "--run-dir", str(tmp_path / "two")]
    assert main([*second, "--export-dir", str(tmp_path / "second")]) == 0

    first_card = json.loads((tmp_path / "first" / "tutorial.json").read_text())
    card = json.loads((tmp_path / "second" / "tutorial.json").read_text())
    assert card["recipe"]["max_lr"] == 0.01 and card["recipe"]["swa"] is True
    assert "weight averaging" in card["recipe"]["schedule"]
    assert card["warm_start"] == {"sha256": models.sha256_file(started), "card": first_card}
    assert card["recipe"]["warm_start_sha256"] == first_card["sha256"]
    assert (card["epochs"], card["total_epochs"]) == (2, 3)
    expected_seconds = card["training_seconds"] + first_card["training_seconds"]
    assert card["total_training_seconds"] == pytest.approx(expected_seconds, abs=0.11)


def test_a_warm_start_that_is_missing_or_not_weights_is_one_clear_line(
    cifar_like_factory: Callable[[int], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["train", "tutorial", "--data", str(cifar_like_factory(20)), "--no-compile"]
    arguments += ["--batch-size", "4", "--run-dir", str(tmp_path / "run")]
    assert main([*arguments, "--warm-start", str(tmp_path / "missing.pt")]) == 2
    assert "missing.pt: no such weights file" in capsys.readouterr().err
    (tmp_path / "text.pt").write_text("not weights")
    assert main([*arguments, "--warm-start", str(tmp_path / "text.pt")]) == 2
    error = capsys.readouterr().err
    assert "text.pt" in error and "Traceback" not in error


def test_resume_from_a_corrupt_checkpoint_is_one_clear_line(
    cifar_like_factory: Callable[[int], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.pt").write_bytes(b"not a checkpoint")
    arguments = ["train", "tutorial", "--data", str(cifar_like_factory(20)), "--resume"]
    arguments += ["--batch-size", "4", "--no-compile", "--run-dir", str(run_dir)]
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert "checkpoint is corrupt" in error and "Traceback" not in error


def test_distilling_with_cutout_records_the_teachers_in_the_card(
    cifar_like_factory: Callable[[int], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cifar_like_factory(40)
    common = ["--data", str(folder), "--batch-size", "8", "--no-compile", "--epochs", "1"]
    first = ["train", "resnet20", *common, "--run-dir", str(tmp_path / "one")]
    assert main([*first, "--export-dir", str(tmp_path / "first")]) == 0
    teacher = tmp_path / "first" / "resnet20.pt"
    second = ["train", "resnet20", *common, "--run-dir", str(tmp_path / "two"), "--cutout", "8"]
    second += ["--teacher", str(teacher), "--distill-weight", "0.3"]
    assert main([*second, "--export-dir", str(tmp_path / "second")]) == 0

    card = json.loads((tmp_path / "second" / "resnet20.json").read_text())
    assert card["recipe"]["teachers"] == [models.sha256_file(teacher)]
    assert card["recipe"]["distill_weight"] == 0.3 and card["recipe"]["cutout"] == 8
    assert card["recipe"]["augmentation"].endswith("cutout 8x8")
    capsys.readouterr()
    assert main([*second[:-4], "--teacher", str(tmp_path / "missing.pt")]) == 2
    assert "missing.pt: no such teacher weights file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*second[:-2], "--distill-weight", "1.5"])
    assert "must be between 0 and 1" in capsys.readouterr().err
