"""The command line: infer, grads and bench on a generated image folder with a tiny weights file."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from gradpick import attribution, data
from gradpick.cli import main
from gradpick.gradients import layers
from gradpick.gradients.engine import input_gradients
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.outputs import store_format as store
from gradpick.outputs.inference import embedding_layer
from gradpick.share import export
from gradpick.ui import heatmaps, service
from gradpick.ui.heatmaps import HeatmapRequest

FOLDER_IMAGES = 12  # 3 classes x 4 images
EXPORTED = [7, 2, 9]
STEP_FIELDS = (
    "schema", "arrays", "shape", "dtype", "rows", "k", "indices", "source_positions",
    "image_names", "labels", "target", "quantity", "classes", "class_names", "method",
    "strategy", "reduction", "chunks",
)  # fmt: skip
"""The fields that describe the step itself (the rest say where, when and how long)."""


@pytest.fixture
def folder(image_folder_factory) -> Path:
    return image_folder_factory(classes=3, per_class=4)


@pytest.fixture
def fitting(image_folder_factory) -> Path:
    """Ten classes of four images, class_00 to class_09: labels the ten-output tutorial net's
    loss can use (the three classes of ``folder`` are ignored by a ten-class model)."""
    return image_folder_factory(classes=10, per_class=4, name="fitting")


@pytest.fixture
def ten_classes(image_folder_factory) -> Path:
    """A folder in CIFAR-10's classes: its labels are the built-in models' outputs."""
    return image_folder_factory(classes=list(data.CIFAR10_CLASSES), per_class=2, name="ten")


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


def test_infer_prints_accuracy_and_throughput(capsys, ten_classes, weights):
    status, out, _ = run(capsys, "infer", *model_arguments(ten_classes, weights))
    assert status == 0
    batch = data.load_batch(data.image_folder(ten_classes))
    logits = models.load("tutorial", weights)(batch.float_images())
    correct = int((logits.argmax(dim=1) == batch.labels).sum())
    assert f"tutorial (weights {weights})" in out
    assert "a batch of 20 of the 20 images" in out
    assert f"({correct} of 20)" in out
    assert "images/s" in out


def test_infer_takes_a_seeded_sample(capsys, ten_classes, weights):
    status, out, _ = run(
        capsys, "infer", *model_arguments(ten_classes, weights), "--size", "5", "--seed", "3"
    )
    assert status == 0
    assert "a batch of 5 of the 20 images" in out and "seed 3" in out
    assert "of 5)" in out


def test_infer_ignores_labels_of_other_classes_and_says_so(capsys, folder, weights):
    status, out, _ = run(capsys, "infer", *model_arguments(folder, weights))
    assert status == 0
    assert "3 classes but the model predicts 10; their labels are ignored" in out
    assert "accuracy" not in out


def test_grads_pt_equals_input_gradients_and_has_a_sidecar(capsys, fitting, weights, tmp_path):
    folder = fitting
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


def test_the_sidecar_records_a_split_only_for_a_folder_of_splits(
    capsys, fitting, weights, tmp_path
):
    shutil.copytree(fitting, tmp_path / "splits" / "train")
    for data_folder, split in ((tmp_path / "splits", "train"), (fitting, None)):
        out_file = tmp_path / "grads.npz"
        arguments = [*model_arguments(data_folder, weights), "--split", "train", "--indices", "0"]
        status, out, _ = run(capsys, "grads", *arguments, "--out", str(out_file))
        assert status == 0, out
        assert json.loads(out_file.with_suffix(".json").read_text())["source"]["split"] == split


def test_grads_npz_with_a_logit_class_by_name(capsys, fitting, weights, tmp_path):
    folder = fitting
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
        (["--indices", "0", "--target", "loss", "--class", "2"], "--target logit"),
        (["--indices", "0", "--target", "logit", "--class", "unicorn"], "Unknown class 'unicorn'"),
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


def test_bench_compare_with_needs_a_store(capsys):
    status, _, err = run(capsys, "bench", "--explorer", "--compare-with", "outputs-b")
    assert status == 2
    assert "--compare-with compares a second store with --store's: give --store." in err


def test_train_then_eval_on_a_folder(
    cifar_like_factory: Callable[[int], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole training command: train, export weights and a card (by default beside the
    checkpoint, in RUN_DIR/export), then evaluate them."""
    folder = cifar_like_factory(40)
    export_dir = tmp_path / "run" / "export"
    arguments = ["train", "tutorial", "--data", str(folder), "--epochs", "1"]
    arguments += ["--batch-size", "8", "--no-compile", "--run-dir", str(tmp_path / "run")]
    assert main(arguments) == 0
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


def _explorer_export(folder: Path, weights: Path, request: HeatmapRequest) -> export.Export:
    """What the explorer's downloads hold for ``EXPORTED`` of the whole folder."""
    choice = service.DataChoice(kind="folder", folder=str(folder), size=None)
    batch = data.load_batch(data.image_folder(folder))
    model = models.load("tutorial", weights)
    result = heatmaps.compute(model, batch, EXPORTED, request)
    option = service.ModelOption("tutorial")
    return heatmaps.export_of(
        result,
        batch,
        EXPORTED,
        request,
        None,
        service.load_model(option, torch.device("cpu")).identity(),
        service.source_record(choice, batch),
        {"colour_scale": "shared"},
    )


@pytest.mark.parametrize(
    ("arguments", "request_"),
    [
        ([], HeatmapRequest()),
        (
            ["--target", "logit", "--class", "1", "--strategy", "summed"],
            HeatmapRequest(target_mode="class", target_class=1, strategy="summed"),
        ),
    ],
)
@pytest.mark.parametrize("suffix", export.SUFFIXES)
def test_the_cli_and_the_explorer_export_the_same_arrays_and_fields(
    capsys, fitting: Path, weights: Path, tmp_path: Path, arguments, request_, suffix: str
) -> None:
    folder = fitting
    out = tmp_path / f"grads{suffix}"
    indices = ", ".join(str(index) for index in EXPORTED)
    status = main(
        [
            "grads",
            *("--data", str(folder), "--model", "tutorial", "--weights", str(weights)),
            *("--indices", indices, "--out", str(out), *arguments),
        ]
    )
    assert status == 0, capsys.readouterr().err
    explorer = _explorer_export(folder, weights, request_)
    if suffix == ".npz":
        from_cli = dict(np.load(out, allow_pickle=False))
        from_explorer = dict(np.load(io.BytesIO(export.npz_bytes(explorer)), allow_pickle=False))
    else:
        from_cli = torch.load(out, weights_only=True)
        from_explorer = torch.load(io.BytesIO(export.pt_bytes(explorer)), weights_only=True)
    assert list(from_cli) == list(from_explorer)
    for name, value in from_cli.items():
        if isinstance(value, torch.Tensor | np.ndarray):
            np.testing.assert_array_equal(np.asarray(value), np.asarray(from_explorer[name]))
        else:
            assert value == from_explorer[name], name
    sidecar = json.loads(out.with_suffix(".json").read_text())
    report = json.loads(export.metadata_json(explorer))
    assert list(sidecar) == list(export.FIELDS)
    assert list(report) == [*export.FIELDS, "explorer"]
    assert {name: sidecar[name] for name in STEP_FIELDS} == {
        name: report[name] for name in STEP_FIELDS
    }
    assert sidecar["target_values"] == pytest.approx(report["target_values"], rel=1e-6)
    assert list(sidecar["model"]) == list(report["model"])
    assert list(sidecar["source"]) == list(report["source"]) and sidecar["source"]["N"] == 40
    assert sidecar["source"]["split"] is None and report["source"]["split"] is None  # plain


def test_infer_out_writes_a_store_of_every_image(capsys, ten_classes, weights, tmp_path):
    out = tmp_path / "outputs"
    status, printed, _ = run(
        capsys, "infer", *model_arguments(ten_classes, weights), "--out", str(out), "--embeddings"
    )
    assert status == 0 and f"wrote 20 rows to {out}" in printed
    opened = store.open_store(out)
    source = data.image_folder(ten_classes)
    batch = data.load_batch(source)
    model = models.load("tutorial", weights)
    # what the last linear layer reads, caught by a hook of the test's own
    last = [module for module in model.modules() if isinstance(module, torch.nn.Linear)][-1]
    caught: list[torch.Tensor] = []
    hook = last.register_forward_pre_hook(lambda _, inputs: caught.append(inputs[0].detach()))
    logits = model(batch.float_images())
    hook.remove()
    frame = opened.table.to_pandas()
    assert frame["position"].tolist() == list(range(20))
    assert frame["name"].tolist() == source.names(range(20))
    assert frame["label"].tolist() == batch.labels.tolist()
    assert frame["prediction"].tolist() == logits.argmax(dim=1).tolist()
    assert torch.allclose(torch.tensor(np.stack(frame["logits"])), logits, atol=1e-5)
    assert len(frame["embedding"][0]) == embedding_layer(model).in_features
    stored = torch.tensor(np.stack(frame["embedding"]))
    assert torch.allclose(stored, caught[0].flatten(1), atol=1e-5)
    meta = opened.metadata
    assert meta["model"]["identity"] == zoo.load_model("tutorial", weights).store_identity
    assert meta["model"]["weights_sha256"] == models.sha256_file(weights)
    assert meta["input_spec"] == zoo.load_model("tutorial", weights).spec.to_json()
    assert meta["source"]["root"] == str(ten_classes)
    assert meta["source"]["fingerprint"] == source.fingerprint()
    assert meta["gradpick_version"] and meta["skipped"] == []
    # the README's one-line pandas query
    worst = pd.read_parquet(out).query("label != prediction").nlargest(3, "loss")
    wrong = frame[frame["label"] != frame["prediction"]]
    assert worst["name"].tolist() == wrong.sort_values("loss", ascending=False)["name"][:3].tolist()


def test_infer_out_skips_and_records_a_corrupt_file(capsys, ten_classes, weights, tmp_path):
    (ten_classes / "cat" / "0001.png").write_bytes(b"broken")
    out = tmp_path / "outputs"
    arguments = [*model_arguments(ten_classes, weights), "--out", str(out)]
    status, printed, _ = run(capsys, "infer", *arguments)
    assert status == 0 and "wrote 19 rows" in printed
    assert "1 file(s) could not be read and were skipped" in printed
    opened = store.open_store(out)
    assert len(opened) == 19 and 7 not in opened.table["position"].to_pylist()
    (skipped,) = opened.metadata["skipped"]
    assert "cat/0001.png" in skipped


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--embeddings"], "give --out DIR too"),
        (["--out", "x.parquet"], "names a folder"),
        (["--out", "/no/such/folder/out"], "does not exist"),
    ],
)
def test_infer_out_refuses_bad_arguments(capsys, folder, weights, extra, message):
    status, _, err = run(capsys, "infer", *model_arguments(folder, weights), *extra)
    assert status == 2 and message in err


def test_grads_ignores_labels_that_do_not_fit_the_model(capsys, folder, weights, tmp_path):
    """Three class folders for a ten-class model: their labels are not the model's classes, so
    no loss against 'class 0 of the model' is taken and shown under the folder's name."""
    status, out, err = run(capsys, "grads", *model_arguments(folder, weights), "--indices", "4")
    assert status == 2 and out == ""
    assert "3 classes but tutorial predicts 10" in err and "--target logit" in err
    out_file = tmp_path / "grads.npz"
    arguments = ["--indices", "4", "--target", "logit", "--class", "cat", "--out", str(out_file)]
    status, out, _ = run(capsys, "grads", *model_arguments(folder, weights), *arguments)
    assert status == 0
    row = next(line for line in out.splitlines() if line.lstrip().startswith("4 "))
    assert " cat " in row and "class_01" not in row.split()[2:]
    sidecar = json.loads(out_file.with_suffix(".json").read_text())
    assert sidecar["labels"] is None and sidecar["class_names"] == ["cat"]
    assert sidecar["classes"] == [data.CIFAR10_CLASSES.index("cat")]
    expected = direct_gradients(folder, weights, [4], target="logit", classes=3)
    np.testing.assert_allclose(np.load(out_file)["gradients"], expected.gradients.numpy())


def test_grads_positions_are_source_positions(capsys, fitting, weights, tmp_path):
    """``--positions`` name images as a store's position column does, whatever batch
    --size/--seed cut; ``--indices`` count within that batch."""
    sample = ["--size", "6", "--seed", "3"]
    batch = data.batch_positions(40, 0, 6, 3)
    position = batch[4]
    out_file = tmp_path / "by-position.npz"
    status, _, err = run(
        capsys,
        "grads",
        *model_arguments(fitting, weights),
        *sample,
        *("--positions", str(position), "--out", str(out_file)),
    )
    assert status == 0, err
    sidecar = json.loads(out_file.with_suffix(".json").read_text())
    assert sidecar["source_positions"] == [position] and sidecar["indices"] == [4]
    expected = direct_gradients(fitting, weights, [position])
    np.testing.assert_allclose(np.load(out_file)["gradients"], expected.gradients.numpy())
    outside = next(p for p in range(40) if p not in batch)
    status, _, err = run(
        capsys, "grads", *model_arguments(fitting, weights), *sample, "--positions", str(outside)
    )
    assert status == 2 and f"Source position {outside} is not in" in err
    status, _, err = run(capsys, "grads", *model_arguments(fitting, weights), "--positions", "40")
    assert status == 2 and "the source holds 40 images" in err


def test_grads_refuses_a_repeated_index(capsys, fitting, weights):
    status, out, err = run(capsys, "grads", *model_arguments(fitting, weights), "--indices", "0, 0")
    assert status == 2 and out == ""
    assert "Index 0 is given more than once" in err


def test_a_batch_of_one_class_of_a_sorted_folder_says_so(capsys, fitting, weights):
    """The first images of a class-sorted folder are all of one class: infer says so, and a
    seeded sample of the same size does not need the note."""
    arguments = ["--model", "tutorial", "--weights", str(weights), "--data", str(fitting)]
    status, out, _ = run(capsys, "infer", *arguments, "--size", "3")
    assert status == 0, out
    assert "note: all 3 are 'class_00', since the source is sorted by class" in out
    status, out, _ = run(capsys, "infer", *arguments, "--size", "3", "--seed", "0")
    assert status == 0 and "note:" not in out
    status, out, _ = run(capsys, "infer", *arguments, "--size", "8")
    assert status == 0 and "note:" not in out  # four images each of class_00 and class_01


def _hand_gradcam(model: torch.nn.Module, images: torch.Tensor, layer: str):
    """Grad-CAM of the predicted class's logit (the layer methods' default target) at
    ``layer`` by a forward hook and autograd, one image at a time."""
    maps = []
    kept: list[torch.Tensor] = []
    for image in images:
        handle = model.get_submodule(layer).register_forward_hook(
            lambda module, inputs, output: kept.append(output)
        )
        try:
            logits = model(image[None].clone().requires_grad_(True))
        finally:
            handle.remove()
        logit = logits[0, int(logits.argmax())]
        (gradient,) = torch.autograd.grad(logit, kept[-1])
        weights = gradient.mean(dim=(2, 3), keepdim=True)
        maps.append(torch.relu((weights * kept[-1]).sum(dim=1))[0].detach())
    return torch.stack(maps)


@pytest.mark.parametrize("suffix", export.SUFFIXES)
def test_grads_exports_gradcam_at_a_named_layer(capsys, fitting, weights, tmp_path, suffix):
    out = tmp_path / f"cam{suffix}"
    arguments = ["--indices", "3, 7", "--method", "gradcam", "--layer", "conv2"]
    status, printed, err = run(
        capsys, "grads", *model_arguments(fitting, weights), *arguments, "--out", str(out)
    )
    assert status == 0, err
    assert "Grad-CAM at layer conv2 (10x10 grid)" in printed
    batch = data.load_batch(data.image_folder(fitting))
    model = models.load("tutorial", weights)
    expected = _hand_gradcam(model, batch.float_images()[[3, 7]], "conv2")
    if suffix == ".npz":
        saved = dict(np.load(out, allow_pickle=False))
        layer = str(saved["layer"])
    else:
        saved = {
            k: np.asarray(v)
            for k, v in torch.load(out, weights_only=True).items()
            if isinstance(v, torch.Tensor)
        }
        layer = torch.load(out, weights_only=True)["layer"]
    assert layer == "conv2"
    np.testing.assert_allclose(saved["layer_maps"], expected.numpy(), rtol=1e-4, atol=1e-6)
    upsampled = torch.nn.functional.interpolate(
        expected[:, None], size=(32, 32), mode="bilinear", align_corners=False
    )[:, 0]
    assert saved["maps"].shape == (2, 32, 32)
    np.testing.assert_allclose(saved["maps"], upsampled.numpy(), rtol=1e-4, atol=1e-6)
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["layer"] == {"name": "conv2", "grid": [10, 10]}
    assert sidecar["arrays"][-2:] == ["layer_maps", "layer"]
    assert sidecar["method"]["name"] == "gradcam"


def test_grads_without_a_layer_uses_the_automatic_one(capsys, fitting, weights, tmp_path):
    out = tmp_path / "cam.npz"
    status, printed, err = run(
        capsys, "grads", *model_arguments(fitting, weights), "--indices", "1",
        "--method", "hirescam", "--out", str(out),
    )  # fmt: skip
    assert status == 0, err
    model = models.load("tutorial", weights)
    assert str(np.load(out)["layer"]) == layers.probe(model, (32, 32)).automatic == "pool"
    assert "HiResCAM at layer pool (5x5 grid)" in printed


def test_grads_exports_an_input_gradient_method_as_its_saliency(capsys, fitting, weights, tmp_path):
    out = tmp_path / "smooth.npz"
    status, _, err = run(
        capsys, "grads", *model_arguments(fitting, weights), "--indices", "2, 5",
        "--method", "smoothgrad", "--setting", "samples=3", "--out", str(out),
    )  # fmt: skip
    assert status == 0, err
    saved = dict(np.load(out, allow_pickle=False))
    assert "layer_maps" not in saved and "layer" not in saved
    batch = data.load_batch(data.image_folder(fitting))
    model = models.load("tutorial", weights)
    picked = batch.float_images()[[2, 5]]  # the CLI reads the picks alone: rows 0 and 1
    noisy = attribution.attribute(
        model, picked, [0, 1], batch.labels[[2, 5]], method="smoothgrad", samples=3
    ).maps
    np.testing.assert_allclose(saved["channel_maps"], noisy.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(saved["maps"], noisy.abs().amax(dim=1).numpy(), rtol=1e-5, atol=1e-7)
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["layer"] is None and sidecar["method"]["settings"]["samples"] == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--method", "gradcamm"], "Unknown attribution method 'gradcamm'; use one of gradient"),
        (["--method", "gradcam", "--layer", "conv3"], "no layer 'conv3'; close matches: conv"),
        (["--layer", "conv2"], "works on the input pixels, not at a layer"),
        (["--method", "gradcam", "--layer", "fc1"], "Layer 'fc1''s output is not a spatial map"),
        (["--method", "gradcam", "--strategy", "summed"], "runs strategy recompute"),
        (["--method", "smoothgrad", "--setting", "steps=3"], "one of SmoothGrad's settings"),
        (["--method", "smoothgrad", "--setting", "samples=x"], "'x' is not a number"),
        (["--method", "smoothgrad", "--setting", "samples=0"], "samples must be a whole number"),
    ],
)
def test_grads_bad_method_or_layer_is_one_clear_line(capsys, fitting, weights, extra, message):
    status, out, err = run(
        capsys, "grads", *model_arguments(fitting, weights), "--indices", "0", *extra
    )
    assert status == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
