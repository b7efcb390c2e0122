"""Stores: the explorer's own inference kept and found again, stores the user opens."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from gradpick import data
from gradpick.cli import main
from gradpick.errors import DataError
from gradpick.models import shipped as models
from gradpick.models.zoo import LoadedModel
from gradpick.outputs import store_format as store
from gradpick.outputs import stores as stored
from gradpick.outputs.inference import infer
from gradpick.ui import service
from gradpick.ui.service import ModelOption

TUTORIAL = ModelOption("tutorial")
"""The seeded stand-in tutorial net (no weights ship in the tests' assets folder)."""


@pytest.fixture
def source(image_folder_factory: Any) -> data.FolderSource:
    return data.image_folder(image_folder_factory(list(data.CIFAR10_CLASSES), per_class=2))


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LoadedModel:
    monkeypatch.setenv(models.ASSETS_DIR_ENV, str(tmp_path / "no-assets"))
    return service.load_model(TUTORIAL, torch.device("cpu"))


def test_the_apps_inference_is_kept_and_found_again(
    source: Any, model: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = data.load_batch(source, size=8, seed=1)
    first = stored.infer_and_keep(model, source, batch)
    path = stored.own_store_path(model, source, batch)
    assert path.parent == data.cache_dir() / "outputs" and store.open_store(path)
    assert torch.equal(first.logits, infer(model.module, batch.images, batch.labels).logits)

    def no_inference(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the kept outputs should have been used")

    monkeypatch.setattr(stored, "infer", no_inference)
    again = stored.infer_and_keep(model, source, batch)
    assert torch.equal(again.logits, first.logits) and torch.equal(again.losses, first.losses)
    assert again.milliseconds > 0  # the stored run's time, for the throughput readout
    # another model, another batch or a changed folder never finds these outputs
    other = data.load_batch(source, size=8, seed=2)
    assert stored.own_store_path(model, source, other) != path
    assert (
        stored.own_store_path(
            service.load_model(ModelOption("resnet20"), torch.device("cpu")), source, batch
        )
        != path
    )
    (source.files[0]).write_bytes((source.files[1]).read_bytes())
    assert stored.own_store_path(model, data.image_folder(source.root), batch) != path


def test_a_cli_store_opens_with_its_folder_and_the_batchs_rows(
    source: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    weights = tmp_path / "tutorial.pt"
    torch.save(models.build("tutorial").state_dict(), weights)
    out = tmp_path / "outputs"
    arguments = ["infer", "--model", "tutorial", "--weights", str(weights)]
    assert main([*arguments, "--data", str(source.root), "--out", str(out)]) == 0
    opened = stored.open_stored(str(out))
    opened_source = stored.stored_source(opened)
    assert opened_source.fingerprint() == source.fingerprint()
    assert stored.is_current(opened, opened_source)
    batch = data.load_batch(opened_source, size=6, seed=0)
    result = stored.stored_result(opened, batch)
    direct = infer(models.load("tutorial", weights), batch.images, batch.labels)
    assert torch.allclose(result.logits, direct.logits, atol=1e-5)
    assert torch.equal(result.predictions, direct.predictions)
    uploaded = service.uploaded_weights_option(
        TUTORIAL, service.Upload.of("tutorial.pt", weights.read_bytes())
    )
    cpu = torch.device("cpu")
    # the same weights, uploaded
    store.check_store(opened, service.load_model(uploaded, cpu).store_identity)
    with pytest.raises(DataError, match="written by model tutorial:"):
        store.check_store(opened, service.load_model(TUTORIAL, cpu).store_identity)


def test_a_store_missing_rows_of_the_batch_says_to_re_infer(
    source: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    weights = tmp_path / "tutorial.pt"
    torch.save(models.build("tutorial").state_dict(), weights)
    out = tmp_path / "outputs"
    arguments = ["infer", "--model", "tutorial", "--weights", str(weights), "--size", "5"]
    assert main([*arguments, "--data", str(source.root), "--out", str(out)]) == 0
    opened = stored.open_stored(str(out))
    batch = data.load_batch(stored.stored_source(opened), start=3, size=4)
    with pytest.raises(
        DataError, match=r"holds no outputs for bird/0001.png \(and 1 more.*Re-infer"
    ):
        stored.stored_result(opened, batch)


@pytest.mark.parametrize(
    ("path", "message"), [("  ", "Type the folder"), ("/nowhere", "no stored")]
)
def test_opening_nothing_is_explained(path: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        stored.open_stored(path)


@pytest.fixture
def sigmoid_store(source: Any, model: LoadedModel, tmp_path: Path) -> tuple[Path, LoadedModel]:
    """A store of the tutorial net read as a multi-label model (``--output sigmoid``)."""
    sigmoid = replace(model, output="sigmoid")
    out = tmp_path / "sigmoid-store"
    stored.infer_to_store(sigmoid, source, range(len(source)), out)
    return out, sigmoid


def test_a_sigmoid_models_store_holds_each_labels_own_probability(
    source: Any, sigmoid_store: tuple[Path, LoadedModel]
) -> None:
    out, sigmoid = sigmoid_store
    opened = store.open_store(out)
    assert opened.metadata["output"] == "sigmoid" == store.store_output(opened.metadata)
    assert "probabilities" in opened.table.column_names
    # the logits computed here, from the images, without gradpick's inference
    batch = data.load_batch(source, size=len(source))
    with torch.no_grad():
        logits = sigmoid.module(batch.images.float() / 255)
    table = opened.table
    probabilities = torch.tensor(table["probabilities"].to_pylist())
    torch.testing.assert_close(torch.tensor(table["logits"].to_pylist()), logits)
    torch.testing.assert_close(probabilities, torch.sigmoid(logits))
    assert probabilities.sum(dim=1).sub(1).abs().max() > 0.01  # not a softmax
    top, predicted = torch.sigmoid(logits).max(dim=1)
    assert table["prediction"].to_pylist() == predicted.tolist()
    torch.testing.assert_close(torch.tensor(table["confidence"].to_pylist()), top)
    # loss: the mean over labels of -t log σ(z) - (1 - t) log(1 - σ(z)), t one-hot of the label
    truth = torch.nn.functional.one_hot(batch.labels, logits.shape[1]).float()
    bce = -truth * torch.nn.functional.logsigmoid(logits)
    bce -= (1 - truth) * torch.nn.functional.logsigmoid(-logits)
    torch.testing.assert_close(torch.tensor(table["loss"].to_pylist()), bce.mean(dim=1))
    # read back for the explorer: the same probabilities, the output kind kept
    again = stored.stored_result(opened, batch)
    assert again.output == "sigmoid"
    torch.testing.assert_close(again.probabilities, torch.sigmoid(logits))


def test_a_sigmoid_model_never_finds_the_softmax_models_kept_outputs(
    source: Any, model: LoadedModel
) -> None:
    batch = data.load_batch(source, size=6, seed=3)
    softmax = stored.infer_and_keep(model, source, batch)
    sigmoid = stored.infer_and_keep(replace(model, output="sigmoid"), source, batch)
    assert softmax.output == "softmax" and sigmoid.output == "sigmoid"
    torch.testing.assert_close(sigmoid.probabilities, torch.sigmoid(softmax.logits))
    kept = stored.infer_and_keep(replace(model, output="sigmoid"), source, batch)
    torch.testing.assert_close(kept.probabilities, torch.sigmoid(softmax.logits))


def test_triage_and_compare_refuse_a_sigmoid_store_with_the_reason(
    sigmoid_store: tuple[Path, LoadedModel], capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = sigmoid_store
    assert main(["triage", "--outputs", str(out)]) == 2
    said = capsys.readouterr().err
    assert f"the store {out} holds a sigmoid model's outputs" in said
    assert "independent labels (sigmoid, multi-label)" in said
    json_out = out.parent / "compare.json"
    assert main(["compare", "--outputs", str(out), "--outputs", str(out), "--json", str(json_out)])
    assert "Compare compares exclusive classes by their softmax" in capsys.readouterr().err


def test_a_sigmoid_store_of_softmax_columns_is_refused(tmp_path: Path) -> None:
    # as gradpick wrote a sigmoid model's store before it recorded the output kind
    out = tmp_path / "old"
    with store.StoreWriter(out, {"model": {"identity": "m", "output": "sigmoid"}}) as writer:
        writer.write(store.output_table([0], ["a.png"], None, torch.zeros(1, 3)))
    with pytest.raises(DataError, match="softmax confidences and losses.*Infer again"):
        store.open_store(out)


def test_cli_infer_output_sigmoid_writes_a_sigmoid_store(source: Any, tmp_path: Path) -> None:
    out = tmp_path / "cli-sigmoid"
    arguments = ["infer", "--model", "tutorial", "--output", "sigmoid", "--data", str(source.root)]
    assert main([*arguments, "--out", str(out)]) == 0
    opened = store.open_store(out)
    assert store.store_output(opened.metadata) == "sigmoid"
    logits = torch.tensor(opened.table["logits"].to_pylist())
    probabilities = torch.tensor(opened.table["probabilities"].to_pylist())
    torch.testing.assert_close(probabilities, torch.sigmoid(logits))


def test_a_whole_stores_source_is_read_from_its_names_and_any_other_is_listed(
    source: data.FolderSource, model: LoadedModel, tmp_path: Path
) -> None:
    stored.infer_to_store(model, source, range(len(source)), tmp_path / "whole")
    stored.infer_to_store(model, source, range(5), tmp_path / "part")
    listings: list[Path] = []
    real_listing = data.image_folder

    def listed(root: Path, spec: Any = data.DEFAULT_SPEC) -> data.FolderSource:
        listings.append(Path(root))
        return real_listing(root, spec)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data.folders, "image_folder", listed)
        whole = stored.stored_source(
            stored.open_stored(str(tmp_path / "whole"), stored.SOURCE_COLUMNS)
        )
        assert not listings  # the whole store's names are its folder's listing
        part = stored.stored_source(
            stored.open_stored(str(tmp_path / "part"), stored.SOURCE_COLUMNS)
        )
        assert listings == [source.root]
    for opened_source in (whole, part):
        assert isinstance(opened_source, data.FolderSource)
        assert opened_source.root == source.root and opened_source.spec == source.spec
        assert opened_source.relative_names == source.relative_names
        assert opened_source.class_names == source.class_names
        assert torch.equal(opened_source.label_tensor, source.label_tensor)
        assert opened_source.description == source.description
    # only the outputs' columns: no names, so the folder is listed
    stored.stored_source(stored.open_stored(str(tmp_path / "whole"), ("position",)))


def test_a_folder_added_to_since_its_store_was_written_is_not_current(
    source: data.FolderSource, model: LoadedModel, tmp_path: Path
) -> None:
    stored.infer_to_store(model, source, range(len(source)), tmp_path / "whole")
    opened = stored.open_stored(str(tmp_path / "whole"), stored.SOURCE_COLUMNS)
    from_names = stored.stored_source(opened)
    assert stored.is_current(opened, from_names)
    (source.root / "cat" / "zz-new.png").write_bytes(source.files[0].read_bytes())
    assert from_names.fingerprint() == source.fingerprint()  # its own names: still the same
    assert not stored.is_current(opened, from_names)  # listed again: one image more


def test_a_folder_check_answers_beside_its_caller_and_again_once_its_answer_is_old(
    source: data.FolderSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    checks: list[str] = []

    def held(checked: data.ImageSource) -> str:
        gate.wait(30)
        checks.append(threading.current_thread().name)
        return f"answer {len(checks)}"

    monkeypatch.setattr(stored, "fingerprint_now", held)
    check = stored.FolderCheck(source, max_age=3600)
    assert check.fingerprint(wait=0) is None and check.checking  # drawn without the answer
    gate.set()
    assert check.fingerprint() == "answer 1" and not check.checking  # waited for
    assert check.fingerprint(wait=0) == "answer 1" and checks == ["gradpick-folder-check"]
    gate.clear()
    stale = stored.FolderCheck(source, max_age=-1)  # every answer is already old
    gate.set()
    assert stale.fingerprint() == "answer 2"
    gate.clear()
    assert stale.fingerprint(wait=0) == "answer 2" and stale.checking  # the last, meanwhile
    gate.set()
    while stale.checking:
        time.sleep(0.01)
    gate.clear()  # the check this call starts (its answer is old at once) waits at the gate
    assert stale.fingerprint(wait=0) == "answer 3"
    gate.set()


def test_a_folder_check_of_a_folder_gone_says_so(
    source: data.FolderSource, model: LoadedModel, tmp_path: Path
) -> None:
    stored.infer_to_store(model, source, range(len(source)), tmp_path / "whole")
    opened = stored.open_stored(str(tmp_path / "whole"), stored.SOURCE_COLUMNS)
    check = stored.FolderCheck(stored.stored_source(opened))
    assert store.store_is_current(opened, str(check.fingerprint()))
    shutil.rmtree(source.root)
    with pytest.raises(DataError, match="no such folder"):
        stored.FolderCheck(stored.stored_source(opened)).fingerprint()


def test_a_stores_embeddings_are_read_when_first_asked_for_and_equal_the_whole_read(
    source: data.FolderSource, model: LoadedModel, tmp_path: Path
) -> None:
    out = tmp_path / "whole"
    stored.infer_to_store(model, source, range(len(source)), out, embeddings=True)
    batch = data.load_batch(source, size=7, seed=4)
    eager = stored.stored_result(stored.open_stored(str(out)), batch)
    lazy = stored.stored_result(stored.open_stored(str(out), stored.OUTPUT_COLUMNS), batch)
    assert isinstance(lazy, stored.StoredResult) and "not read yet" in repr(lazy)
    assert eager.features is not None and torch.equal(lazy.logits, eager.logits)
    assert lazy.feature_width == eager.features.shape[1] and "not read yet" in repr(lazy)
    direct = infer(model.module, batch.images, batch.labels, features=True).features
    assert direct is not None and torch.allclose(lazy.features, direct, atol=1e-5)
    assert torch.equal(lazy.features, eager.features) and lazy.features is lazy.features
    without = tmp_path / "without"
    stored.infer_to_store(model, source, range(len(source)), without)
    plain = stored.stored_result(stored.open_stored(str(without), stored.OUTPUT_COLUMNS), batch)
    assert plain.features is None and plain.feature_width is None
    assert lazy.feature_width == lazy.features.shape[1]
    again = stored.stored_result(stored.open_stored(str(out), stored.OUTPUT_COLUMNS), batch)
    assert isinstance(again, stored.StoredResult) and again.rows_key == lazy.rows_key
    other_rows = data.load_batch(source, size=7, seed=5)
    other = stored.stored_result(stored.open_stored(str(out), stored.OUTPUT_COLUMNS), other_rows)
    assert isinstance(other, stored.StoredResult) and other.rows_key != lazy.rows_key
    stored.infer_to_store(model, source, range(len(source)), out, embeddings=True)  # again
    rewritten = stored.stored_result(stored.open_stored(str(out), stored.OUTPUT_COLUMNS), batch)
    assert isinstance(rewritten, stored.StoredResult) and rewritten.rows_key != lazy.rows_key
    with pytest.raises(DataError, match="written again since it was opened"):
        again.features  # noqa: B018


def test_a_folder_check_that_fails_unforeseen_says_so_and_is_done(
    source: data.FolderSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(checked: data.ImageSource) -> str:
        raise ValueError("a bug")

    monkeypatch.setattr(stored, "fingerprint_now", broken)
    monkeypatch.setattr(threading, "excepthook", lambda arguments: None)  # printed, not failed
    check = stored.FolderCheck(source)
    with pytest.raises(DataError, match="could not be checked against the store"):
        check.fingerprint()
    assert not check.checking
