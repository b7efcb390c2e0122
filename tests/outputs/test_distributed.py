"""Inference on Ray Data: the same rows as in one process, one store format, clear failures.

All tests share one small local Ray instance (2 CPUs, a 150 MB object store, Hugging Face
offline) started once per module, the Hugging Face sources and models at the end included;
deselect them with ``-m "not distributed"``.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from gradpick import data
from gradpick.cli import main
from gradpick.data import CIFAR10_CLASSES
from gradpick.errors import DataError, InputError
from gradpick.models import shipped as models
from gradpick.models import zoo
from gradpick.models.spec import InputSpec
from gradpick.outputs import distributed
from gradpick.outputs import store_format as store
from gradpick.outputs import stores as stored
from gradpick.outputs.inference import infer
from tests.data.test_parquet import _dataset, hub_rows
from tests.outputs.local_ray import local_ray

pytestmark = pytest.mark.distributed

__all__ = ["hub_rows"]  # the Parquet writer's fixture, used here

ray = pytest.importorskip("ray", reason="Ray is the optional extra gradpick[distributed]")

CIFAR_IMAGES = 300


@pytest.fixture(scope="module", autouse=True)
def ray_session() -> Iterator[None]:
    """One local Ray instance for the module; its workers inherit this process's environment
    (Hugging Face offline)."""
    import ray.cloudpickle

    # The test's own recipes and models travel to the workers by value, not by module name.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with local_ray({"HF_HUB_OFFLINE": "1"}):
        yield


def rows_of(source: data.FolderSource, labelled: bool = True) -> list[distributed.Row]:
    positions = list(range(len(source)))
    labels = source.labels().tolist() if labelled else [None] * len(source)  # type: ignore[union-attr]
    return list(zip(positions, source.names(positions), labels, strict=True))


def in_process_reference(
    model: nn.Module, spec: InputSpec, source: data.FolderSource, labelled: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of each file prepared by ``spec.prepare`` and inferred in this process."""
    images = []
    for path in source.files:
        with Image.open(path) as image:
            images.append(spec.prepare(image)[0])
    labels = source.labels() if labelled else None
    result = infer(models.freeze(model), torch.stack(images), labels, batch_size=64)
    return result.logits, result.predictions


def assert_store_matches(
    out: Path, source: data.FolderSource, logits, predictions, labelled: bool = True
) -> None:
    opened = store.open_store(out)
    table = opened.table
    assert table.column("position").to_pylist() == list(range(len(source)))
    assert table.column("name").to_pylist() == source.names(range(len(source)))
    labels = source.labels().tolist() if labelled else [None] * len(source)  # type: ignore[union-attr]
    assert table.column("label").to_pylist() == labels
    if not labelled:
        assert table.column("loss").null_count == len(source)
    assert table.column("prediction").to_pylist() == predictions.tolist()
    stored = torch.tensor(np.stack(table.column("logits").to_numpy(zero_copy_only=False)))
    torch.testing.assert_close(stored, logits, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def cifar_subset(tmp_path_factory: pytest.TempPathFactory) -> data.FolderSource:
    """300 shared CIFAR-10 test images (30 per class), symlinked into a temporary tree."""
    configured = os.environ.get(data.CIFAR10_DIR_ENV)
    shared = (
        Path(configured) if configured else Path(__file__).parents[3] / "shared/data/cifar10-jpg"
    )
    if not (shared / "test").is_dir():
        pytest.skip(f"real CIFAR-10 data not found at {shared}; set ${data.CIFAR10_DIR_ENV}")
    root = tmp_path_factory.mktemp("cifar-subset")
    for class_dir in sorted((shared / "test").iterdir()):
        (root / class_dir.name).mkdir()
        for path in sorted(class_dir.iterdir())[: CIFAR_IMAGES // 10]:
            (root / class_dir.name / path.name).symlink_to(path)
    return data.image_folder(root)


def test_cifar_store_equals_in_process_rows_schema_and_metadata(cifar_subset, tmp_path, capsys):
    recipe = distributed.model_recipe("resnet20")
    spec = InputSpec()
    out = tmp_path / "outputs"
    leftover = tmp_path / ".outputs.partial-0123456789ab"
    (leftover / "part-00000.parquet").parent.mkdir()
    (leftover / "part-00000.parquet").write_bytes(b"an interrupted run's part")
    metadata = {"model": {"name": "resnet20"}, "source": {"root": str(cifar_subset.root)}}
    lines: list[str] = []
    run = distributed.infer_on_ray(
        recipe,
        rows_of(cifar_subset),
        cifar_subset.root,
        spec,
        metadata,
        out,
        distributed.ClusterOptions(workers=2, batch_size=64),
        log=lines.append,
    )
    assert run.rows == CIFAR_IMAGES and not leftover.exists()
    assert any("discarded their parts and started over" in line for line in lines)
    logits, predictions = in_process_reference(recipe(), spec, cifar_subset)
    assert_store_matches(out, cifar_subset, logits, predictions)
    # Exactly the schema and metadata of a store written in this process from the same rows.
    in_process = tmp_path / "in-process"
    positions = list(range(len(cifar_subset)))
    ray_seconds = store.open_store(out).metadata["inference_seconds"]
    with store.StoreWriter(in_process, metadata) as writer:
        writer.write(
            store.output_table(
                positions, cifar_subset.names(positions), cifar_subset.labels(), logits
            )
        )
        writer.annotate(skipped=[], notes=[], inference_seconds=ray_seconds)
    import pyarrow.parquet as pq

    expected = pq.read_schema(next(in_process.glob("*.parquet")))
    for part in out.glob("*.parquet"):
        written = pq.read_schema(part)
        assert written.equals(expected, check_metadata=True), (written, expected)
    assert store.open_store(out).metadata == store.open_store(in_process).metadata
    assert not list(tmp_path.glob(".outputs.*"))


class Recorded(nn.Module):
    """Wraps a model; each forward leaves a file naming this process, then takes its time."""

    def __init__(self, inner: nn.Module, log_dir: Path, seconds: float) -> None:
        super().__init__()
        self.inner, self.log_dir, self.seconds = inner, log_dir, seconds

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        (self.log_dir / f"batch-{os.getpid()}-{time.monotonic_ns()}").touch()
        time.sleep(self.seconds)
        return self.inner(images)


def recorded_tutorial(log_dir: Path, seconds: float) -> nn.Module:
    (log_dir / f"built-{os.getpid()}").touch()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Recorded(models.build("tutorial"), log_dir, seconds)


def pids(log_dir: Path, kind: str) -> list[int]:
    return [int(path.name.split("-")[1]) for path in log_dir.glob(f"{kind}-*")]


def test_a_worker_killed_mid_run_is_retried_and_every_row_is_stored_once(
    image_folder_factory, tmp_path
):
    source = data.image_folder(image_folder_factory(classes=3, per_class=40))
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    recipe = functools.partial(recorded_tutorial, log_dir, 0.3)
    killed: list[int] = []
    finished = threading.Event()

    def kill_the_first_busy_worker() -> None:
        """Watches for as long as the run goes: on busy cores the workers may take minutes to
        start (a fixed 120 s once ran out before the first batch, beside two CPU burners)."""
        while not killed and not finished.is_set():
            busy = pids(log_dir, "batch")
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                killed.append(busy[0])
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_first_busy_worker)
    killer.start()
    out = tmp_path / "outputs"
    try:
        run = distributed.infer_on_ray(
            recipe,
            rows_of(source),
            source.root,
            InputSpec(),
            {},
            out,
            distributed.ClusterOptions(workers=2, batch_size=10),
        )
    finally:
        finished.set()
        killer.join()
    assert killed, "no worker started a batch"
    built = pids(log_dir, "built")
    assert len(set(built)) >= 3, f"the killed worker was not restarted (built in {built})"
    assert len(pids(log_dir, "batch")) > len(source) // 10, "the killed batch was not redone"
    assert run.rows == len(source)
    plain = recorded_tutorial(tmp_path, 0.0)
    logits, predictions = in_process_reference(plain, InputSpec(), source)
    assert_store_matches(out, source, logits, predictions)


def seeded_resnet18() -> nn.Module:
    """torchvision's ResNet-18 with seeded random weights, the same in every worker."""
    import torchvision

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return torchvision.models.resnet18(num_classes=10)


@pytest.fixture
def photo_folder(tmp_path: Path) -> data.FolderSource:
    """Three scikit-image photos, each saved at three sizes and in two formats."""
    from skimage import data as photos

    root = tmp_path / "photos"
    for name in ("astronaut", "chelsea", "coffee"):
        image = Image.fromarray(getattr(photos, name)())
        (root / name).mkdir(parents=True)
        for scale, suffix in ((1.0, ".png"), (0.5, ".jpg"), (0.23, ".jpg")):
            size = (round(image.width * scale), round(image.height * scale))
            image.resize(size, Image.Resampling.BILINEAR).save(root / name / f"{scale}{suffix}")
    return data.image_folder(root)


def test_unlabelled_mixed_size_photos_with_a_torchvision_model_equal_in_process(
    photo_folder, tmp_path
):
    spec = InputSpec(size=(64, 64), resize=72)
    out = tmp_path / "outputs"
    distributed.infer_on_ray(
        seeded_resnet18,
        rows_of(photo_folder, labelled=False),
        photo_folder.root,
        spec,
        {"model": "resnet18"},
        out,
        distributed.ClusterOptions(workers=1, batch_size=4),
    )
    logits, predictions = in_process_reference(
        seeded_resnet18(), spec, photo_folder, labelled=False
    )
    assert_store_matches(out, photo_folder, logits, predictions, labelled=False)


# ----------------------------------------------------------------------------- bad input


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().err


def ray_arguments(folder: Path, out: Path) -> list[str]:
    return [
        "infer",
        "--engine",
        "ray",
        "--data",
        str(folder),
        "--model",
        "tutorial",
        "--out",
        str(out),
    ]


@pytest.fixture
def folder(image_folder_factory) -> Path:
    return image_folder_factory(classes=2, per_class=3)


def test_an_unreachable_address_is_a_clear_error(capsys, folder, tmp_path):
    status, err = run_cli(
        capsys, *ray_arguments(folder, tmp_path / "out"), "--address", "127.0.0.1:1"
    )
    assert status == 2
    assert "No Ray cluster answers at 127.0.0.1:1" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_ray_not_installed_says_how_to_install_it(capsys, folder, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.data", None)
    status, err = run_cli(capsys, *ray_arguments(folder, tmp_path / "out"))
    assert status == 2
    assert "pip install 'gradpick[distributed]'" in err


def test_a_source_the_workers_cannot_read_fails_and_publishes_nothing(tmp_path):
    rows: Sequence[distributed.Row] = [(0, "class_00/0000.png", 0)]
    out = tmp_path / "out"
    with pytest.raises(DataError, match="no such folder on worker"):
        distributed.infer_on_ray(
            distributed.model_recipe("tutorial"),
            rows,
            tmp_path / "only-on-the-driver",
            InputSpec(),
            {},
            out,
        )
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_corrupt_image_is_skipped_and_listed_on_both_engines(
    capsys, image_folder_factory, tmp_path, engine
):
    """In this process and on Ray: the unreadable file has no row, the store's metadata and
    the printed notes name it, and every other image is stored."""
    root = image_folder_factory(classes=2, per_class=3)
    (root / "class_01" / "0002.png").write_bytes(b"not an image")
    out = tmp_path / "out"
    arguments = ["infer", "--data", str(root), "--model", "tutorial", "--out", str(out)]
    ray_options = ["--engine", "ray", "--workers", "1", "--batch-size", "2"]
    status = main([*arguments, *(ray_options if engine == "ray" else [])])
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "1 file(s) could not be read and were skipped: class_01/0002.png: not a readable" in (
        printed
    )
    opened = store.open_store(out)
    assert opened.table.column("position").to_pylist() == [0, 1, 2, 3, 4]
    (skipped,) = opened.metadata["skipped"]
    assert skipped.startswith("class_01/0002.png: not a readable image")
    assert opened.metadata["notes"] == [
        line.removeprefix("note: ") for line in printed.splitlines() if line.startswith("note: ")
    ]


def test_a_run_of_only_unreadable_images_fails_clearly_and_publishes_nothing(
    image_folder_factory, tmp_path
):
    root = image_folder_factory(classes=1, per_class=2)
    for path in (root / "class_00").iterdir():
        path.write_bytes(b"not an image")
    source = data.image_folder(root)
    out = tmp_path / "out"
    with pytest.raises(InputError, match="None of the images could be read"):
        distributed.infer_on_ray(
            distributed.model_recipe("tutorial"),
            rows_of(source),
            root,
            InputSpec(),
            {},
            out,
            distributed.ClusterOptions(workers=1, batch_size=2),
        )
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def test_in_process_inference_never_imports_ray(folder):
    script = (
        "import sys; from gradpick.cli import main; "
        f"status = main(['infer', '--data', {str(folder)!r}, '--model', 'tutorial']); "
        "assert status == 0, status; assert 'ray' not in sys.modules, 'ray was imported'"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]


def test_the_local_object_store_is_capped_at_2_gib_or_a_fifth_of_memory():
    assert distributed.local_object_store_bytes(24 * 10**9) == 2 * 1024**3
    assert distributed.local_object_store_bytes(4 * 10**9) == int(0.8 * 10**9)


@pytest.mark.parametrize("address", ["127.0.0.1", "host:port", ":6379"])
def test_an_address_without_host_and_port_is_refused(address):
    with pytest.raises(InputError, match="host:port"):
        distributed.check_reachable(address)


def test_mixed_labelled_and_unlabelled_rows_are_refused(tmp_path):
    with pytest.raises(InputError, match="Either every image has a label or none"):
        distributed.infer_on_ray(
            distributed.model_recipe("tutorial"),
            [(0, "a.png", 1), (1, "b.png", None)],
            tmp_path,
            InputSpec(),
            {},
            tmp_path / "out",
        )


def test_a_part_that_lost_the_metadata_is_adopted_with_it(tmp_path):
    import pyarrow.parquet as pq

    rows = store.output_table([0, 1], ["a.png", "b.png"], None, torch.randn(2, 3))
    with store.StoreWriter(tmp_path / "out", {"model": "m"}) as writer:
        pq.write_table(rows.replace_schema_metadata(None), writer.partial / "ray-part.parquet")
        assert writer.adopt_parts() == 2
    opened = store.open_store(tmp_path / "out")
    assert opened.metadata["model"] == "m" and len(opened) == 2
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["ray-part.parquet"]


def test_a_part_with_other_columns_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = store.StoreWriter(tmp_path / "out", {})
    with pytest.raises(DataError, match="are not the store's"), writer:
        pq.write_table(pa.table({"x": [1]}), writer.partial / "ray-part.parquet")
        writer.adopt_parts()
    assert not (tmp_path / "out").exists()


def test_the_cli_writes_a_store_the_explorer_opens_and_says_it_started_over(
    capsys, folder, tmp_path
):
    out = tmp_path / "out"
    (tmp_path / ".out.partial-0123456789ab").mkdir()
    status, err = run_cli(capsys, *ray_arguments(folder, out), "--workers", "1")
    assert status == 0, err
    assert "found 1 unfinished earlier run(s)" in err
    opened = store.open_store(out)
    source = data.image_folder(folder)
    assert opened.table.column("name").to_pylist() == source.names(range(len(source)))
    fingerprint = store.source_fingerprint(folder, source.names(range(len(source))))
    assert opened.metadata["source"]["fingerprint"] == fingerprint
    # The in-process command's store of the same folder: the same rows and the same metadata
    # (but for the time the run took).
    local = tmp_path / "local"
    assert main(["infer", "--data", str(folder), "--model", "tutorial", "--out", str(local)]) == 0
    expected = store.open_store(local)
    for column in ("position", "name", "label", "prediction"):
        assert opened.table.column(column).equals(expected.table.column(column)), column
    np.testing.assert_allclose(
        np.stack(opened.table.column("logits").to_pylist()),
        np.stack(expected.table.column("logits").to_pylist()),
        rtol=1e-5,
        atol=1e-6,
    )
    seconds = "inference_seconds"
    assert {k: v for k, v in opened.metadata.items() if k != seconds} == {
        k: v for k, v in expected.metadata.items() if k != seconds
    }


def test_more_workers_than_the_cluster_holds_is_refused_instead_of_waiting(
    capsys, folder, tmp_path
):
    status, err = run_cli(capsys, *ray_arguments(folder, tmp_path / "out"), "--workers", "3")
    assert status == 2
    assert "3 worker(s) x 1 CPU (--cpus-per-worker) need 3 CPUs" in err
    status, err = run_cli(
        capsys, *ray_arguments(folder, tmp_path / "out"), "--gpus-per-worker", "1"
    )
    assert status == 2 and "need 2 GPUs" in err


def busy_workers(ancestor: int) -> list[int]:
    """Processes descended from ``ancestor`` whose title says they run a Ray task or actor."""
    parents: dict[int, int] = {}
    titles: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            titles[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == ancestor:
                return True
        return False

    return [
        pid
        for pid, title in titles.items()
        if title.startswith("ray::") and not title.startswith("ray::IDLE") and descends(pid)
    ]


def test_an_interrupted_run_of_its_own_local_instance_publishes_nothing(cifar_subset, tmp_path):
    """Ctrl-C on the command, which started (and must stop) its own local Ray instance.

    Its source holds each image forty times (links), so that the run is still going when the
    interruption comes: at load 20 the 300 images alone were all stored first, and on a quiet
    machine ten copies each once ran to the end (exit 0) between the worker's start and the
    interruption. The images past the interruption cost nothing."""
    out = tmp_path / "out"
    repeated = tmp_path / "repeated"
    for path in sorted(cifar_subset.root.glob("*/*")):
        (repeated / path.parent.name).mkdir(parents=True, exist_ok=True)
        for copy in range(40):
            (repeated / path.parent.name / f"{copy}-{path.name}").symlink_to(path.resolve())
    command = [
        *(sys.executable, "-m", "gradpick", "infer", "--engine", "ray", "--model", "resnet20"),
        *("--data", str(repeated), "--out", str(out), "--batch-size", "10"),
        *("--workers", "1"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # A hung start fails rather than hangs the test; on busy cores a Ray instance and its
    # worker can take minutes to start (another Ray test once took 5 minutes beside two CPU
    # burners), so the bound is far above that.
    deadline = time.monotonic() + 600
    # Interrupted once the pipeline runs: its parts folder exists and a Ray worker of the
    # command's own instance is busy (Ray names a working process ray::<what it runs>).
    while not (list(tmp_path.glob(".out.partial-*")) and busy_workers(process.pid)):
        assert process.poll() is None, "the run ended before it was interrupted"
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 130, err[-2000:]
    assert "interrupted" in err
    assert not out.exists() and not list(tmp_path.glob(".out.*"))


def seeded_tutorial() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return models.build("tutorial")


def test_embeddings_on_ray_are_what_the_last_linear_layer_reads(image_folder_factory, tmp_path):
    source = data.image_folder(image_folder_factory(classes=2, per_class=3))
    out = tmp_path / "outputs"
    run = distributed.infer_on_ray(
        seeded_tutorial,
        rows_of(source),
        source.root,
        InputSpec(),
        {},
        out,
        distributed.ClusterOptions(workers=1, batch_size=4),
        embeddings=True,
    )
    assert run.rows == len(source)
    model = models.freeze(seeded_tutorial())
    last = [module for module in model.modules() if isinstance(module, nn.Linear)][-1]
    caught: list[torch.Tensor] = []
    hook = last.register_forward_pre_hook(lambda _, inputs: caught.append(inputs[0].detach()))
    logits, predictions = in_process_reference(model, InputSpec(), source)
    hook.remove()
    assert_store_matches(out, source, logits, predictions)
    table = store.open_store(out).table
    stored = torch.tensor(np.stack(table.column("embedding").to_numpy(zero_copy_only=False)))
    torch.testing.assert_close(stored, torch.cat(caught).flatten(1), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------- Hugging Face sources and models


def _on_ray(loaded: zoo.LoadedModel, source: Any, out: Path) -> None:
    """``gradpick infer --engine ray`` as the command runs it."""
    positions = list(range(len(source)))
    root, rows = distributed.source_rows(source, positions, loaded.classes)
    distributed.infer_on_ray(
        distributed.model_recipe(loaded.name),
        rows,
        root,
        loaded.spec,
        store.store_metadata(loaded.identity(), loaded.spec, source),
        out,
        distributed.ClusterOptions(workers=1, batch_size=16),  # two batches, one worker
    )


def _list(table: Any, column: str) -> torch.Tensor:
    return torch.tensor(np.stack(table.column(column).to_numpy(zero_copy_only=False)))


def _assert_same_store(ray_out: Path, here_out: Path) -> store.OpenedStore:
    """The two stores hold the same rows, columns and output kind (floats up to rounding)."""
    on_ray, here = store.open_store(ray_out), store.open_store(here_out)
    assert on_ray.table.schema.remove_metadata() == here.table.schema.remove_metadata()
    assert on_ray.metadata["output"] == here.metadata["output"]
    assert on_ray.metadata["source"]["fingerprint"] == here.metadata["source"]["fingerprint"]
    for column in ("position", "name", "label", "prediction"):
        assert on_ray.table.column(column).to_pylist() == here.table.column(column).to_pylist()
    for column in ("confidence", "loss"):
        torch.testing.assert_close(
            torch.tensor(on_ray.table.column(column).to_pylist()),
            torch.tensor(here.table.column(column).to_pylist()),
        )
    lists = [c for c in ("logits", "probabilities") if c in here.table.column_names]
    for column in lists:
        torch.testing.assert_close(_list(on_ray.table, column), _list(here.table, column))
    return on_ray


def test_a_hub_parquet_dataset_on_ray_equals_its_store_in_this_process(
    hub_rows: dict[str, list[tuple[bytes, str, int]]], tmp_path: Path
) -> None:
    root = _dataset(tmp_path / "hub", hub_rows, card=True)
    loaded = zoo.load_model("resnet20")  # its shipped weights
    source = data.open_source(root, split="train", spec=loaded.spec)
    assert len(source.shards) == 2 and len(source) == 20  # rows across shards and row groups
    _on_ray(loaded, source, tmp_path / "ray")
    stored.infer_to_store(loaded, source, range(len(source)), tmp_path / "here")
    opened = _assert_same_store(tmp_path / "ray", tmp_path / "here")
    assert opened.table.column("name").to_pylist()[0] == "data/train-00000-of-00002.parquet#0"
    assert opened.table.column("label").null_count == 0


@pytest.fixture(scope="module")
def multi_label_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Hugging Face ResNet of CIFAR-10's labels, multi-label, saved offline."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("hf-resnet")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        config = transformers.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=10,
            id2label=dict(enumerate(CIFAR10_CLASSES)),
            label2id={name: i for i, name in enumerate(CIFAR10_CLASSES)},
            problem_type="multi_label_classification",
        )  # fmt: skip
        transformers.ResNetForImageClassification(config).save_pretrained(folder)
    transformers.BitImageProcessor(
        size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(folder)
    return folder


def test_an_hf_model_on_ray_equals_its_store_in_this_process(
    multi_label_hf: Path, generated_folder: Path, tmp_path: Path
) -> None:
    loaded = zoo.load_model(f"hf:{multi_label_hf}")
    assert loaded.kind == "hf" and loaded.output == "sigmoid"
    source = data.image_folder(generated_folder / "test", spec=loaded.spec)
    _on_ray(loaded, source, tmp_path / "ray")
    stored.infer_to_store(loaded, source, range(len(source)), tmp_path / "here")
    opened = _assert_same_store(tmp_path / "ray", tmp_path / "here")
    # each label's own probability, through the workers' model too
    torch.testing.assert_close(
        _list(opened.table, "probabilities"), torch.sigmoid(_list(opened.table, "logits"))
    )
    assert opened.metadata["model"]["identity"] == loaded.store_identity
    assert os.environ["HF_HUB_OFFLINE"] == "1"
