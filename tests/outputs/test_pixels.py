"""A store's decoded images: kept beside it whole or not at all, and decoded lazily until then."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gradpick import data
from gradpick.cli import main
from gradpick.data.batches import LazyBatch
from gradpick.models import shipped as models
from gradpick.outputs import pixels
from gradpick.ui import service


@pytest.fixture
def source(image_folder_factory: Any) -> data.FolderSource:
    return data.image_folder(image_folder_factory(list(data.CIFAR10_CLASSES), per_class=2))


@pytest.fixture
def store(source: data.FolderSource, tmp_path: Path) -> Path:
    """A store of the 20 images by the tutorial net, written as ``gradpick infer --out`` does."""
    weights = tmp_path / "tutorial.pt"
    torch.save(models.build("tutorial").state_dict(), weights)
    out = tmp_path / "outputs"
    arguments = ["infer", "--model", "tutorial", "--weights", str(weights)]
    assert main([*arguments, "--data", str(source.root), "--out", str(out)]) == 0
    return out


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The position of every image this process decodes from now on."""
    seen: list[int] = []
    read_one = data.FolderSource.read_one

    def counted(self: data.FolderSource, position: int) -> Any:
        seen.append(position)
        return read_one(self, position)

    monkeypatch.setattr(data.FolderSource, "read_one", counted)
    return seen


@pytest.fixture
def kept(source: Any, tmp_path: Path) -> tuple[Path, data.ImageBatch, Path]:
    """A batch of 6 images kept under the key ``key-a`` beside a store at ``tmp_path /
    outputs``: the store's path, the batch and the kept file."""
    out = tmp_path / "outputs"
    batch = data.load_batch(source, size=6, seed=3)
    assert pixels.keep(batch, out, "key-a")
    return out, batch, tmp_path / f"outputs{pixels.PIXELS_SUFFIX}"


def test_a_batch_is_kept_beside_the_store_and_read_back_under_its_key_only(
    kept: tuple[Path, data.ImageBatch, Path], tmp_path: Path
) -> None:
    out, batch, kept_file = kept
    assert kept_file.is_file()  # beside the store, not in it
    again = pixels.load_kept(out, "key-a")
    assert again is not None
    assert torch.equal(again.images, batch.images) and again.images.dtype == torch.uint8
    assert torch.equal(again.labels, batch.labels)
    assert (again.names, again.positions, again.class_names, again.source, again.split) == (
        batch.names, batch.positions, batch.class_names, batch.source, batch.split
    )  # fmt: skip
    mapped = pixels.load_kept(out, "key-a", mmap=True)
    assert mapped is not None and torch.equal(mapped.images, batch.images)
    assert pixels.load_kept(out, "key-b") is None  # other images, spec or batch
    assert not pixels.keep(batch, tmp_path / "big", "key-a", at_most=batch.images.numel() - 1)
    assert not (tmp_path / f"big{pixels.PIXELS_SUFFIX}").exists()
    kept_file.write_bytes(b"damaged")
    assert pixels.load_kept(out, "key-a") is None
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_names_and_positions_are_kept_compact_and_an_earlier_files_tuples_still_read(
    kept: tuple[Path, data.ImageBatch, Path],
) -> None:
    """50,000 names and positions as Python objects were most of the file's load time."""
    out, batch, kept_file = kept
    raw = torch.load(kept_file, weights_only=True)
    assert raw["names"] == "\0".join(batch.names)
    assert torch.equal(raw["positions"], torch.tensor(batch.positions))
    # A file kept before, with the names and positions as tuples, reads the same.
    fields = {name: getattr(batch, name) for name in data.ImageBatch.__dataclass_fields__}
    torch.save({**fields, "key": "key-a"}, kept_file)
    earlier = pixels.load_kept(out, "key-a")
    assert earlier is not None and (earlier.names, earlier.positions) == (
        batch.names, batch.positions
    )  # fmt: skip
    # No images: no names.
    assert batch.labels is not None
    empty = data.ImageBatch(
        batch.images[:0], batch.labels[:0], batch.class_names, (), (), batch.source
    )
    assert pixels.keep(empty, out, "none")
    none = pixels.load_kept(out, "none")
    assert none is not None and (none.names, none.positions, len(none)) == ((), (), 0)


def test_an_interrupted_write_leaves_no_file_that_reads_as_complete(
    source: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where = tmp_path / "stores"
    where.mkdir()
    out = where / "outputs"
    batch = data.load_batch(source, size=6, seed=3)
    assert pixels.keep(batch, out, "key")
    whole = (where / f"outputs{pixels.PIXELS_SUFFIX}").read_bytes()
    (where / f"outputs{pixels.PIXELS_SUFFIX}").write_bytes(whole[: len(whole) // 2])
    assert pixels.load_kept(out, "key") is None  # a cut file is not taken for the pixels
    (where / f"outputs{pixels.PIXELS_SUFFIX}").unlink()
    save = torch.save

    def stopped_halfway(value: Any, path: Any) -> None:
        save(value, path)
        Path(path).write_bytes(Path(path).read_bytes()[:100])
        raise KeyboardInterrupt  # the job is stopped while it writes

    monkeypatch.setattr(torch, "save", stopped_halfway)
    with pytest.raises(KeyboardInterrupt):
        pixels.keep(batch, out, "key")
    assert list(where.iterdir()) == []  # no file, not even a part
    assert pixels.load_kept(out, "key") is None


def test_a_large_stores_batch_decodes_only_the_rows_asked_for(
    source: Any, store: Path, decodes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pixels, "LAZY_ABOVE", 4)
    monkeypatch.setattr(pixels, "_keep_in_background", lambda *args: lambda: None)
    choice = service.DataChoice(kind="stored", outputs=str(store), size=12, seed=5)
    batch = service.read_batch(service.open_source(choice), choice)
    eager = data.load_batch(source, size=12, seed=5)
    decodes.clear()
    assert isinstance(batch, LazyBatch) and decodes == [] and not batch.all_decoded
    assert len(batch) == 12 and batch.image_size == (32, 32)
    assert (batch.positions, batch.names) == (eager.positions, eager.names)
    assert torch.equal(batch.labels, eager.labels)
    assert torch.equal(batch.rows([7, 2]), eager.images[[7, 2]])
    assert sorted(decodes) == sorted(eager.positions[i] for i in (2, 7))
    assert torch.equal(batch.rows(torch.tensor([2])), eager.images[[2]])
    assert torch.equal(batch.rows(slice(0, 3)), eager.images[0:3])
    assert len(decodes) == 4  # rows 0 and 1 were new, row 2 was decoded already
    assert torch.equal(batch.images, eager.images)  # the whole tensor: every image, decoded
    assert len(decodes) == 12 and sorted(decodes) == sorted(eager.positions)
    assert batch.all_decoded


def test_the_background_job_keeps_every_image_and_the_batch_takes_them_over(
    source: Any, store: Path, decodes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pixels, "LAZY_ABOVE", 4)
    choice = service.DataChoice(kind="stored", outputs=str(store), size=12, seed=5)
    batch = service.read_batch(service.open_source(choice), choice)
    decodes.clear()
    deadline = time.monotonic() + 300  # a hung job fails the test rather than hanging it
    while not batch.all_decoded:
        assert time.monotonic() < deadline, "the background job never finished"
        time.sleep(0.1)
    assert decodes == []  # taken over from the kept file, not decoded in this process
    eager = data.load_batch(source, size=12, seed=5)
    decodes.clear()
    assert torch.equal(batch.images, eager.images) and decodes == []
    assert (store.parent / f"outputs{pixels.PIXELS_SUFFIX}").is_file()
    again = service.read_batch(service.open_source(choice), choice)  # the next server
    assert not isinstance(again, LazyBatch) and torch.equal(again.images, eager.images)
    assert decodes == []


def test_the_background_job_starts_when_the_batch_is_first_read_not_when_it_opens(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's warm-up opens the store before it serves: the job (importing torch, then
    decoding every image) waits for a page to show the batch, and starts once."""
    monkeypatch.setattr(pixels, "LAZY_ABOVE", 4)
    started: list[tuple[object, ...]] = []
    monkeypatch.setattr(pixels, "_start_job", lambda *args: started.append(args))
    choice = service.DataChoice(kind="stored", outputs=str(store), size=12, seed=5)
    batch = service.read_batch(service.open_source(choice), choice)
    assert isinstance(batch, LazyBatch) and started == []
    batch.rows([0])
    batch.rows([1, 2])
    assert len(started) == 1 and not batch.all_decoded  # no job: the rows asked for, decoded


def test_the_page_keys_a_stores_pixels_by_its_folders_fingerprint(
    source: Any, store: Path, decodes: list[int]
) -> None:
    """The page's read of a store's batch finds the kept pixels until the folder changes."""
    choice = service.DataChoice(kind="stored", outputs=str(store), size=6)
    first = service.read_batch(service.open_source(choice), choice)
    assert len(decodes) == 6
    again = service.read_batch(service.open_source(choice), choice)
    assert len(decodes) == 6 and torch.equal(again.images, first.images)
    (source.files[0]).write_bytes((source.files[1]).read_bytes())  # the folder changed
    changed = service.read_batch(service.open_source(choice), choice)
    assert len(decodes) == 12 and torch.equal(changed.images[0], changed.images[1])


def test_one_job_per_store_a_second_one_leaves_it_to_the_first(
    source: Any, store: Path, decodes: list[int], tmp_path: Path
) -> None:
    key = "the-key"
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"store": str(store), "key": key, "positions": [0, 1, 2]}))
    lock = tmp_path / f"outputs{pixels.PIXELS_SUFFIX}.lock"
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a first job is decoding
        pixels.main(str(job))
        assert decodes == [] and pixels.load_kept(store, key) is None
    job.write_text(json.dumps({"store": str(store), "key": key, "positions": [0, 1, 2]}))
    pixels.main(str(job))  # the lock is free: this one decodes and keeps
    assert sorted(decodes) == [0, 1, 2] and not job.exists()
    kept = pixels.load_kept(store, key)
    assert kept is not None and kept.positions == (0, 1, 2)
    job.write_text(json.dumps({"store": str(store), "key": key, "positions": [0, 1, 2]}))
    pixels.main(str(job))  # kept already: nothing to decode
    assert len(decodes) == 3


YIELDING_JOB = """
import os, sys, time
from pathlib import Path
from gradpick.outputs import pixels_job
pixels_job.yield_the_cpu(int(sys.argv[2]))
said = Path(sys.argv[1])
group = pixels_job.AUTOGROUP.read_text() if pixels_job.AUTOGROUP.exists() else ""
said.write_text(f"{os.getsid(0)} {os.getpid()} {os.nice(0)} {group}")
time.sleep(120)
"""
"""A stand-in for the job: it yields as the job does, says how, and would sleep two minutes."""


def test_the_job_yields_to_other_sessions_and_ends_with_the_server_that_started_it(
    tmp_path: Path,
) -> None:
    """Started in a session of its own (as ``_start_job`` starts it) by a process that then
    exits, as a server does on Ctrl-C: the job's session and its scheduling group run at the
    lowest priority, and the job interrupts itself within seconds instead of running on."""
    said = tmp_path / "said.txt"
    server = (
        "import os, subprocess, sys\n"
        "command = [sys.executable, '-c', sys.argv[1], sys.argv[2], str(os.getpid())]\n"
        "job = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, "
        "start_new_session=True)\n"
        "import pathlib, time\n"
        "while not pathlib.Path(sys.argv[2]).exists() and job.poll() is None:\n"
        "    time.sleep(0.05)\n"  # the job has yielded and said how: the server goes
        "print(job.pid)\n"
    )
    started = subprocess.run(
        [sys.executable, "-c", server, YIELDING_JOB, str(said)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    job = int(started.stdout.strip())
    deadline = time.monotonic() + 120  # a stuck job fails the test rather than hanging it
    while Path(f"/proc/{job}").exists() and "zombie" not in _state(job):
        assert time.monotonic() < deadline, "the job outlived its server"
        time.sleep(0.1)
    session, pid, nice, *group = said.read_text().split()
    assert session == pid == str(job) and nice == "19"
    if group:  # Linux with autogroups: the session's group yields too
        assert group[-2:] == ["nice", "19"]


def _state(pid: int) -> str:
    """The process's state as /proc says it (empty once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""
    return next((line for line in status.splitlines() if line.startswith("State:")), "").lower()


def test_the_job_is_started_in_a_session_of_its_own_told_its_server(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[list[str], dict[str, Any]]] = []
    monkeypatch.setattr(
        pixels.subprocess, "Popen", lambda command, **options: started.append((command, options))
    )
    pixels._start_job(store, "the-key", np.arange(3))
    [(command, options)] = started
    assert command[1:4] == ["-m", "gradpick.outputs.pixels_job", str(os.getpid())]
    assert options["start_new_session"] is True
    Path(command[4]).unlink()  # the job file, which the job would have read and removed
