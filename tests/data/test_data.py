"""Image sources: uploads, folders, CIFAR-10 (downloaded from a local stand-in), batches."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import pickle
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image, features

from gradpick import data
from gradpick.data import (
    CIFAR10_CLASSES,
    ArraySource,
    Cifar10Mirror,
    FolderSource,
    ImageSource,
    UploadSource,
    batch_positions,
    cifar10,
    cifar10_batches_folder,
    decode_image,
    decoded_cache,
    decoding,
    default_cifar10,
    image_folder,
    images_from_files,
    images_from_paths,
    load_batch,
    open_source,
    sources,
    stream,
)
from gradpick.errors import DataError, DownloadError, InputError
from gradpick.models.spec import InputSpec

# ----------------------------------------------------------------------------- single images


def encode(image: Image.Image, format: str, **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **options)
    return buffer.getvalue()


def noise(size: tuple[int, int], mode: str = "RGB", seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)


def test_a_32px_png_decodes_to_its_exact_pixels() -> None:
    image = noise((32, 32))
    decoded, note = decode_image(encode(image, "PNG"), "noise.png")
    assert decoded.dtype == torch.uint8 and decoded.shape == (3, 32, 32)
    assert torch.equal(decoded, torch.from_numpy(np.array(image)).permute(2, 0, 1))
    assert note is None


@pytest.mark.parametrize(
    ("format", "mode", "size"),
    [
        ("JPEG", "RGB", (640, 480)),
        ("PNG", "RGBA", (50, 40)),
        ("PNG", "L", (33, 90)),
        ("BMP", "RGB", (32, 32)),
        ("WEBP", "RGB", (64, 64)),
    ],
)
def test_any_format_mode_and_size_becomes_32px_rgb(
    format: str, mode: str, size: tuple[int, int]
) -> None:
    if format == "WEBP" and not features.check("webp"):
        pytest.skip("this Pillow build has no WebP support")
    decoded, _ = decode_image(encode(noise(size, mode), format), f"image.{format.lower()}")
    assert decoded.dtype == torch.uint8 and decoded.shape == (3, 32, 32)


def test_transparency_is_flattened_onto_white() -> None:
    image = Image.new("RGBA", (32, 32), (10, 200, 30, 0))
    image.putpixel((0, 0), (10, 200, 30, 255))
    decoded, _ = decode_image(encode(image, "PNG"))
    assert decoded[:, 0, 0].tolist() == [10, 200, 30]
    assert (decoded[:, 1:, 1:] == 255).all()


def test_grayscale_is_expanded_to_three_equal_channels() -> None:
    decoded, _ = decode_image(encode(noise((32, 32), "L"), "PNG"))
    assert torch.equal(decoded[0], decoded[1]) and torch.equal(decoded[1], decoded[2])


def test_the_centre_is_kept_when_cropping() -> None:
    image = Image.new("RGB", (96, 32), (0, 0, 0))
    image.paste((255, 255, 255), (32, 0, 64, 32))  # the centre third is white
    decoded, _ = decode_image(encode(image, "PNG"))
    assert (decoded == 255).all()


def test_an_animated_gif_gives_its_first_frame_and_a_note() -> None:
    frames = [Image.new("RGB", (32, 32), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    gif = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100)
    decoded, note = decode_image(gif, "spin.gif")
    assert decoded[:, 5, 5].tolist() == [255, 0, 0]
    assert note is not None and "spin.gif" in note and "first frame" in note


def truncated_png() -> bytes:
    whole = encode(noise((64, 64)), "PNG")
    return whole[: len(whole) // 2]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x00\x01garbage" * 50, "not a readable image"),
        (b"these are my notes, not a picture\n", "not a readable image"),
        (b"", "not a readable image"),
        (truncated_png(), "corrupt or truncated"),
    ],
    ids=["random bytes", "text file", "empty file", "truncated png"],
)
def test_unreadable_bytes_give_a_data_error_naming_the_file(payload: bytes, message: str) -> None:
    with pytest.raises(DataError, match=f"^photo.png: .*{message}"):
        decode_image(payload, "photo.png")


def test_an_image_over_the_pixel_limit_is_refused_before_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decoding, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(DataError, match="big.png: 40x40 pixels is too large.*downscale"):
        decode_image(encode(noise((40, 40)), "PNG"), "big.png")


def test_files_become_an_unlabelled_source_and_every_bad_file_is_named() -> None:
    good = encode(noise((32, 32)), "PNG")
    source = images_from_files([("a.png", good), ("b.jpg", encode(noise((40, 32)), "JPEG"))])
    assert len(source) == 2 and source.labels() is None
    assert source.names([1, 0]) == ["b.jpg", "a.png"]
    assert source.class_names == CIFAR10_CLASSES
    with pytest.raises(DataError) as caught:
        images_from_files([("ok.png", good), ("x.png", b"nope"), ("y.png", b"nope")])
    assert "x.png" in str(caught.value) and "y.png" in str(caught.value)
    with pytest.raises(DataError, match="No images given"):
        images_from_files([])


def test_paths_are_read_and_a_missing_one_is_named(tmp_path: Path, image_file: Any) -> None:
    path = image_file(tmp_path / "cat.png")
    assert len(images_from_paths([path])) == 1
    with pytest.raises(DataError, match="dog.png: no such file"):
        images_from_paths([path, tmp_path / "dog.png"])


# ----------------------------------------------------------------------------- folders


def test_image_folder_finds_classes_labels_and_decodes_lazily(
    image_folder_factory: Callable[..., Path],
) -> None:
    root = image_folder_factory(classes=["dog", "cat", "bird"], per_class=2)
    (root / "cat" / "readme.txt").write_text("not an image")
    source = image_folder(root)
    assert isinstance(source, FolderSource)
    assert source.class_names == ("bird", "cat", "dog")
    assert len(source) == 6
    assert source.labels().tolist() == [0, 0, 1, 1, 2, 2]  # type: ignore[union-attr]
    assert source.names([2]) == ["cat/0000.png"]
    images = source.read([5, 0])
    assert images.shape == (2, 3, 32, 32) and images.dtype == torch.uint8
    expected, _ = decode_image((root / "dog" / "0001.png").read_bytes())
    assert torch.equal(images[0], expected)


def test_a_batch_finds_the_indices_of_the_positions_it_holds(
    image_folder_factory: Callable[..., Path],
) -> None:
    source = image_folder(image_folder_factory(classes=3, per_class=4))
    batch = data.load_batch(source, size=6, seed=3)
    expected = {position: index for index, position in enumerate(batch.positions)}
    asked = [*batch.positions[::2], 99, -1, *[p for p in range(12) if p not in expected][:2]]
    assert batch.indices_of(asked) == {p: expected[p] for p in batch.positions[::2]}
    assert batch.indices_of(range(12)) == expected and batch.indices_of([]) == {}


def test_a_folder_without_images_or_a_missing_folder_is_explained(tmp_path: Path) -> None:
    (tmp_path / "empty" / "class_a").mkdir(parents=True)
    with pytest.raises(DataError, match="no images found.*ImageFolder layout"):
        image_folder(tmp_path / "empty")
    with pytest.raises(DataError, match="no such folder"):
        image_folder(tmp_path / "missing")


def test_a_text_file_named_png_fails_when_read(
    image_folder_factory: Callable[..., Path],
) -> None:
    root = image_folder_factory(classes=2, per_class=1)
    (root / "class_01" / "0000.png").write_text("I am not a PNG")
    source = image_folder(root)
    assert len(source.read([0])) == 1
    with pytest.raises(DataError, match="0000.png: not a readable image"):
        source.read([1])


@pytest.mark.parametrize("kind", ["folder", "arrays", "uploads"])
def test_reading_a_position_past_the_end_names_it_and_the_size(
    image_folder_factory: Callable[..., Path], kind: str
) -> None:
    folder = image_folder(image_folder_factory(classes=1, per_class=5))
    source: ImageSource = {
        "folder": folder,
        "arrays": ArraySource(folder.read(range(5)), None, CIFAR10_CLASSES, "arrays"),
        "uploads": images_from_paths(folder.files),
    }[kind]
    with pytest.raises(DataError, match=r"[Pp]osition 7 .* 5 images \(positions 0 to 4\)"):
        source.read([3, 7])
    with pytest.raises(DataError, match="[Pp]osition -1 "):
        source.read([-1])  # not the last image
    with pytest.raises(DataError, match="[Pp]osition 5 "):
        list(stream(source, [0, 5], workers=0))
    assert source.read([4, 0]).shape == (2, 3, 32, 32)


def test_open_source_picks_the_split_of_a_train_test_folder(
    image_folder_factory: Callable[..., Path],
) -> None:
    image_folder_factory(classes=2, per_class=1, name="both/train")
    root = image_folder_factory(classes=3, per_class=1, name="both/test").parent
    assert len(open_source(root, "train")) == 2
    assert len(open_source(root, "test")) == 3
    assert len(open_source(root / "test")) == 3  # a plain ImageFolder tree
    with pytest.raises(InputError, match="Unknown split 'val'"):
        open_source(root, "val")
    with pytest.raises(DataError, match="no such folder"):
        open_source(root / "nowhere")


# ----------------------------------------------------------------------------- CIFAR-10 batches


def write_cifar_batches(folder: Path, per_batch: int = 2) -> dict[str, tuple[np.ndarray, list]]:
    """A miniature ``cifar-10-batches-py`` folder, in torchvision's exact file format."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    contents: dict[str, tuple[np.ndarray, list]] = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        images = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(label) for label in rng.integers(0, 10, per_batch)]
        contents[name] = (images, labels)
        entry = {"batch_label": name, "data": images, "labels": labels}
        (folder / name).write_bytes(pickle.dumps(entry))
    meta = {"label_names": list(CIFAR10_CLASSES), "num_cases_per_batch": per_batch}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return contents


def test_a_cifar_batches_folder_is_read_without_download(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    contents = write_cifar_batches(folder, per_batch=3)
    test = cifar10_batches_folder(folder, "test")
    images, labels = contents["test_batch"]
    assert torch.equal(test.images, torch.from_numpy(images.reshape(-1, 3, 32, 32)))
    assert test.labels().tolist() == labels  # type: ignore[union-attr]
    assert test.class_names == CIFAR10_CLASSES
    assert len(cifar10_batches_folder(folder, "train")) == 15
    # open_source recognises the folder and the folder that holds it
    assert len(open_source(folder, "test")) == 3
    assert len(open_source(tmp_path, "train")) == 15


def test_a_source_records_the_split_it_was_opened_at_and_none_for_a_plain_folder(
    image_folder_factory: Callable[..., Path], tmp_path: Path
) -> None:
    image_folder_factory(classes=2, per_class=1, name="both/train")
    both = image_folder_factory(classes=3, per_class=1, name="both/test").parent
    plain = image_folder_factory(classes=2, per_class=2, name="plain")
    write_cifar_batches(tmp_path / "cifar-10-batches-py")
    cases = [
        (open_source(both, "train"), "train"),
        (open_source(both, "test"), "test"),
        (open_source(plain, "test"), None),  # the split asked for is not in a plain folder
        (open_source(plain, "train"), None),
        (image_folder(plain), None),
        (open_source(tmp_path, "train"), "train"),
        (cifar10_batches_folder(tmp_path / "cifar-10-batches-py", "test"), "test"),
        (images_from_paths(image_folder(plain).files), None),
    ]
    for source, split in cases:
        assert source.origin()["split"] == split, source.description
        assert load_batch(source).split == split, source.description
        assert source.at_spec(InputSpec(size=(40, 40))).origin()["split"] == split


def test_a_broken_cifar_batches_folder_is_explained(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    write_cifar_batches(folder)
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match="missing data_batch_3"):
        cifar10_batches_folder(folder, "train")
    (folder / "test_batch").write_bytes(b"garbage")
    with pytest.raises(DataError, match="not a CIFAR-10 batch file"):
        cifar10_batches_folder(folder, "test")


# ----------------------------------------------------------------------------- CIFAR-10 download


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def cifar_stand_in(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A CIFAR-10 archive served over HTTP on 127.0.0.1, with a mirror that points at it."""
    contents = write_cifar_batches(tmp_path / "build" / "cifar-10-batches-py", per_batch=2)
    served = tmp_path / "served"
    served.mkdir()
    archive = served / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "build" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    file_md5 = {path.name: md5(path) for path in (tmp_path / "build").rglob("*") if path.is_file()}
    handler = functools.partial(QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    port = server.server_address[1]
    mirror = Cifar10Mirror(f"http://127.0.0.1:{port}/{archive.name}", md5(archive), file_md5)
    try:
        yield {"mirror": mirror, "contents": contents, "server": server}
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_cifar10_downloads_with_progress_then_works_offline(
    cifar_stand_in: dict[str, Any], tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    calls: list[tuple[int, int]] = []
    test = cifar10(
        "test",
        root=root,
        mirror=cifar_stand_in["mirror"],
        progress=lambda *call: calls.append(call),
    )
    images, labels = cifar_stand_in["contents"]["test_batch"]
    assert torch.equal(test.images, torch.from_numpy(images.reshape(-1, 3, 32, 32)))
    assert test.labels().tolist() == labels  # type: ignore[union-attr]
    assert test.class_names == CIFAR10_CLASSES
    assert calls and calls[-1][0] == calls[-1][1] > 0
    assert all(done <= total for done, total in calls)

    cifar_stand_in["server"].shutdown()  # offline from now on
    cifar_stand_in["server"].server_close()
    offline = cifar10("train", root=root, mirror=cifar_stand_in["mirror"])
    assert len(offline) == 10


def test_an_unreachable_mirror_without_cache_says_how_to_use_a_local_folder(
    cifar_stand_in: dict[str, Any], tmp_path: Path
) -> None:
    good = cifar_stand_in["mirror"]
    mirror = Cifar10Mirror(
        f"http://127.0.0.1:{closed_port()}/cifar-10-python.tar.gz", good.archive_md5, good.file_md5
    )
    with pytest.raises(DownloadError, match="local copy.*ImageFolder.*GRADPICK_CIFAR10_DIR"):
        cifar10("test", root=tmp_path / "cache", mirror=mirror)


def test_a_corrupted_download_fails_its_checksum(
    cifar_stand_in: dict[str, Any], tmp_path: Path
) -> None:
    good = cifar_stand_in["mirror"]
    mirror = Cifar10Mirror(good.url, "0" * 32, good.file_md5)
    with pytest.raises(DownloadError, match="failed its checksum"):
        cifar10("test", root=tmp_path / "cache", mirror=mirror)
    assert not (tmp_path / "cache" / "cifar-10-python.tar.gz").exists()


def test_no_download_and_no_cache_is_explained(
    cifar_stand_in: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(DownloadError, match="No CIFAR-10 copy.*GRADPICK_CIFAR10_DIR"):
        cifar10("test", root=tmp_path / "cache", download=False, mirror=cifar_stand_in["mirror"])


@pytest.mark.parametrize("download", [True, False])
def test_cifar10_missing_offline_names_both_ways_to_an_existing_copy(
    cifar_stand_in: dict[str, Any], tmp_path: Path, download: bool
) -> None:
    good = cifar_stand_in["mirror"]
    mirror = Cifar10Mirror(
        f"http://127.0.0.1:{closed_port()}/cifar-10-python.tar.gz", good.archive_md5, good.file_md5
    )
    with pytest.raises(DownloadError) as raised:
        cifar10("test", root=tmp_path / "cache", download=download, mirror=mirror)
    message = str(raised.value)
    assert "GRADPICK_CIFAR10_DIR" in message and "--data" in message, message


def test_a_missing_configured_cifar10_folder_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRADPICK_CIFAR10_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=r"nowhere: no such folder.*\$GRADPICK_CIFAR10_DIR"):
        default_cifar10("test")


def test_default_cifar10_honours_the_environment_variable(
    image_folder_factory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    image_folder_factory(classes=list(CIFAR10_CLASSES), per_class=1, name="local/test")
    root = image_folder_factory(classes=list(CIFAR10_CLASSES), per_class=2, name="local/train")
    monkeypatch.setenv("GRADPICK_CIFAR10_DIR", str(root.parent))
    assert len(default_cifar10("test")) == 10
    assert len(default_cifar10("train")) == 20
    assert default_cifar10("test").class_names == CIFAR10_CLASSES


# ----------------------------------------------------------------------------- batches


def test_batch_positions_slices_and_seeded_samples() -> None:
    assert batch_positions(10, start=3, size=4) == [3, 4, 5, 6]
    assert batch_positions(10) == list(range(10))
    sample = batch_positions(1000, size=20, seed=4)
    assert sample == batch_positions(1000, size=20, seed=4)
    assert sample != batch_positions(1000, size=20, seed=5)
    assert len(set(sample)) == len(sample) == 20 and max(sample) < 1000
    assert sample != sorted(sample), "a seeded sample keeps its random order"
    assert all(0 <= position < 1000 for position in sample)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"size": 0}, "between 1 and 10"),
        ({"size": 11}, "between 1 and 10"),
        ({"size": 11, "seed": 1}, "between 1 and 10"),
        ({"start": 10, "size": 1}, "Start must be between 0 and 9"),
        ({"start": -1, "size": 1}, "Start must be between 0 and 9"),
        ({"start": 8, "size": 3}, "runs past the end"),
    ],
)
def test_bad_batch_positions_are_input_errors(arguments: dict[str, int], message: str) -> None:
    with pytest.raises(InputError, match=message):
        batch_positions(10, **arguments)


def test_load_batch_reads_in_chunks_with_progress(
    image_folder_factory: Callable[..., Path],
) -> None:
    source = image_folder(image_folder_factory(classes=3, per_class=3))
    calls: list[tuple[int, int]] = []
    batch = load_batch(source, start=1, size=7, chunk_size=3, progress=lambda *c: calls.append(c))
    assert calls == [(3, 7), (6, 7), (7, 7)]
    assert batch.positions == tuple(range(1, 8))
    assert torch.equal(batch.images, source.read(range(1, 8)))
    assert batch.labels is not None and batch.labels.tolist() == [0, 0, 1, 1, 1, 2, 2]
    assert batch.names[0] == "class_00/0001.png"
    assert batch.class_names == source.class_names and len(batch) == 7
    floats = batch.float_images()
    assert floats.dtype == torch.float32 and floats.min() >= 0.0 and floats.max() <= 1.0
    assert torch.equal(floats, batch.images.float() / 255)


def test_a_seeded_batch_is_reproducible(image_folder_factory: Callable[..., Path]) -> None:
    source = image_folder(image_folder_factory(classes=2, per_class=5))
    first = load_batch(source, size=4, seed=9, chunk_size=2)
    again = load_batch(source, size=4, seed=9)
    assert first.positions == again.positions
    assert torch.equal(first.images, again.images)
    assert torch.equal(first.images, source.read(list(first.positions)))


def test_load_batch_refuses_a_zero_chunk(image_folder_factory: Callable[..., Path]) -> None:
    source = image_folder(image_folder_factory(classes=1, per_class=2))
    with pytest.raises(InputError, match="chunk_size must be at least 1"):
        load_batch(source, chunk_size=0)


def test_decoded_cache_decodes_once(
    image_folder_factory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GRADPICK_CACHE_DIR", str(tmp_path / "cache"))
    source = image_folder(image_folder_factory(classes=2, per_class=2))
    first = decoded_cache(source)
    assert list((tmp_path / "cache" / "decoded").glob("*.pt"))

    def no_decoding(self: FolderSource, positions: Any) -> torch.Tensor:
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(FolderSource, "read_one", no_decoding)
    cached = decoded_cache(source)
    assert torch.equal(cached.images, first.images)
    assert torch.equal(cached.labels, first.labels)  # type: ignore[arg-type]
    assert cached.class_names == first.class_names


# ----------------------------------------------------------------------------- real CIFAR-10


def test_the_real_cifar10_test_split(shared_cifar10_dir: Path) -> None:
    source = open_source(shared_cifar10_dir, "test")
    assert len(source) == 10_000
    assert source.class_names == CIFAR10_CLASSES
    labels = source.labels()
    assert labels is not None and torch.bincount(labels).tolist() == [1000] * 10
    batch = load_batch(source, start=4990, size=20, chunk_size=8)
    assert batch.images.shape == (20, 3, 32, 32) and batch.images.dtype == torch.uint8
    assert batch.labels is not None and batch.labels.tolist() == labels[4990:5010].tolist()
    assert batch.images.float().std() > 10  # real pictures, not blank


def test_class_names_are_read_one_per_line(tmp_path: Path) -> None:
    path = tmp_path / "names.txt"
    path.write_text("cat\n\n dog \nbird\n")
    assert data.read_class_names(path) == ("cat", "dog", "bird")


@pytest.mark.parametrize("content", [None, "", "\n \n"])
def test_missing_or_empty_class_names_are_explained(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "names.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DataError, match="names"):
        data.read_class_names(path)


def test_a_20000_by_20000_png_is_refused_as_too_large(
    png_claiming: Callable[[int, int], bytes],
) -> None:
    with pytest.raises(DataError, match="bomb.png: .*too large"):
        decode_image(png_claiming(20_000, 20_000), "bomb.png")


def test_a_cached_cifar10_copy_is_read_without_importing_torchvision(
    cifar_stand_in: dict[str, Any], tmp_path: Path
) -> None:
    """A server that only serves the cached copy need not pay torchvision's memory."""
    root = tmp_path / "cache"
    cifar10("test", root=root, mirror=cifar_stand_in["mirror"])
    script = (
        "import sys; from gradpick.data import cifar10; "
        f"source = cifar10('test', root={str(root)!r}); "
        "print(len(source), 'torchvision' in sys.modules)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    images, _ = cifar_stand_in["contents"]["test_batch"]
    assert shown == [str(len(images)), "False"]


def test_a_damaged_cached_copy_says_how_to_download_again(
    cifar_stand_in: dict[str, Any], tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    cifar10("test", root=root, mirror=cifar_stand_in["mirror"])
    (root / "cifar-10-batches-py" / "test_batch").write_bytes(b"truncated")
    with pytest.raises(DataError, match="not a CIFAR-10 batch file.*Delete .* to download"):
        cifar10("test", root=root, mirror=cifar_stand_in["mirror"])


# ----------------------------------------------------------------------------- any input size


def by_hand(image: Image.Image, side: int, shorter: int | None = None) -> torch.Tensor:
    """The reference pipeline: RGB, bilinear resize of the shorter side, centre crop; the longer
    side rounded down, as torchvision's ``Resize`` computes it (451x300 to 224: 336x224)."""
    rgb = image.convert("RGB")
    shorter = shorter or side
    long = int(shorter * max(rgb.size) / min(rgb.size))
    size = (shorter, long) if rgb.width <= rgb.height else (long, shorter)
    resized = rgb.resize(size, Image.Resampling.BILINEAR)
    left, top = (size[0] - side) // 2, (size[1] - side) // 2
    cropped = resized.crop((left, top, left + side, top + side))
    return torch.from_numpy(np.array(cropped)).permute(2, 0, 1)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-image's sample photos at their own sizes (512x512, 451x300, 600x400) as an
    ImageFolder tree, as JPEG and PNG."""
    skimage_data = pytest.importorskip("skimage.data")
    root = tmp_path_factory.mktemp("photos")
    for name in ("astronaut", "chelsea", "coffee"):
        image = Image.fromarray(getattr(skimage_data, name)())
        (root / name).mkdir()
        image.save(root / name / "photo.png")
        image.save(root / name / "photo.jpg", quality=92)
    return root


@pytest.mark.parametrize(("side", "shorter"), [(64, None), (224, None), (224, 256)])
def test_real_photos_are_prepared_like_a_hand_written_pil_pipeline(
    photos: Path, side: int, shorter: int | None
) -> None:
    spec = InputSpec(size=(side, side), resize=shorter)
    source = image_folder(photos, spec)
    assert source.names(range(len(source)))[:2] == ["astronaut/photo.jpg", "astronaut/photo.png"]
    images = source.read(range(len(source)))
    assert images.shape == (6, 3, side, side) and images.dtype == torch.uint8
    for position, path in enumerate(source.files):
        with Image.open(path) as opened:
            expected = by_hand(opened, side, shorter)
        assert (images[position].int() - expected.int()).abs().max() <= 1


def test_uploaded_photos_read_as_the_same_folder_does(photos: Path) -> None:
    spec = InputSpec(size=(224, 224))
    folder = image_folder(photos, spec)
    uploads = images_from_paths(list(folder.files), spec)
    assert isinstance(uploads, UploadSource) and len(uploads) == len(folder)
    assert torch.equal(uploads.read(range(len(uploads))), folder.read(range(len(folder))))
    batch = load_batch(uploads)
    assert batch.images.shape == (6, 3, 224, 224) and batch.notes == ()


def test_a_folder_source_holds_paths_not_pixels(
    image_folder_factory: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = image_folder_factory(classes=4, per_class=100, size=(48, 48))
    monkeypatch.setattr(sources, "decode", None)  # opening the folder must decode nothing
    source = image_folder(root, InputSpec(size=(224, 224)))
    decoded_bytes = len(source) * 3 * 224 * 224
    assert len(pickle.dumps(source)) < decoded_bytes / 100
    assert all(isinstance(name, str) for name in source.relative_names)


def test_a_16_bit_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = rng.integers(1, 65_507, (64, 64)).astype(np.uint16)
    values[0, 0], values[0, 1] = 1, 65_506
    path = tmp_path / "deep" / "sixteen.png"
    path.parent.mkdir()
    Image.fromarray(values).save(path)
    with Image.open(path) as opened:
        assert opened.mode.startswith("I")  # really 16 bits on disk
    pixels = image_folder(tmp_path).read([0])[0].double()
    expected = values.mean() / 65_535 * 255
    assert abs(float(pixels.mean()) - expected) < 0.5
    assert 120 < float(pixels.mean()) < 130  # not 254.7, PIL's clipped conversion


def test_16_bit_images_are_scaled_by_the_types_range_not_their_own(tmp_path: Path) -> None:
    """A dark 16-bit photo stays dark and two exposures keep their difference: one fixed
    scale (0 to 65,535) for every image, where a scale per image would stretch each."""
    rng = np.random.default_rng(1)
    dark = rng.integers(1_000, 3_000, (40, 40)).astype(np.uint16)
    brighter = dark * 4
    folder = tmp_path / "exposures" / "only"
    folder.mkdir(parents=True)
    for name, values in (("a_dark.png", dark), ("b_brighter.png", brighter)):
        Image.fromarray(values).save(folder / name)
    pixels = image_folder(tmp_path / "exposures").read([0, 1]).double()
    for read, values in zip(pixels, (dark, brighter), strict=True):
        expected = np.rint(values.astype(np.float64) / 65_535 * 255).mean()
        assert abs(float(read.mean()) - expected) < 0.5
    assert float(pixels[0].mean()) < 12 and float(pixels[1].max()) < 48


def test_a_corrupt_file_in_a_folder_is_skipped_and_named(
    image_folder_factory: Callable[..., Path],
) -> None:
    root = image_folder_factory(classes=3, per_class=20)
    (root / "class_01" / "0007.png").write_bytes(b"not a picture")
    (root / "class_02" / "0003.png").write_bytes(encode(noise((64, 64)), "PNG")[:200])
    source = image_folder(root)
    batch = load_batch(source, chunk_size=16, workers=1)
    assert len(batch) == 58 and 27 not in batch.positions and 43 not in batch.positions
    assert batch.positions == tuple(p for p in range(60) if p not in (27, 43))
    assert batch.labels is not None and batch.labels.tolist() == [
        int(source.label_tensor[p]) for p in batch.positions
    ]
    (note,) = batch.notes
    assert note.startswith("2 file(s) could not be read and were skipped")
    assert "0007.png: not a readable image" in note and "0003.png" in note
    with pytest.raises(DataError, match="0007.png"):
        source.read([27])  # a picked image must be read exactly, or refused


def test_streaming_in_workers_equals_reading_here(
    image_folder_factory: Callable[..., Path],
) -> None:
    source = image_folder(image_folder_factory(classes=2, per_class=9), InputSpec(size=(40, 40)))
    here = list(stream(source, chunk_size=4, workers=0))
    there = list(stream(source, chunk_size=4, workers=2))
    assert [chunk.positions for chunk in here] == [chunk.positions for chunk in there]
    assert [len(chunk) for chunk in here] == [4, 4, 4, 4, 2]
    assert torch.equal(torch.cat([c.images for c in here]), torch.cat([c.images for c in there]))


def test_small_images_are_upscaled_with_a_note(image_folder_factory: Callable[..., Path]) -> None:
    source = image_folder(image_folder_factory(classes=1, per_class=12, size=(20, 24)))
    batch = load_batch(source)
    assert batch.images.shape == (12, 3, 32, 32)
    (note,) = batch.notes
    assert note.startswith("12 image(s) smaller than the model's input (32x32) were upscaled")
    assert "class_00/0000.png" in note and "and 2 more." in note
    _, single = decode_image(encode(noise((20, 24)), "PNG"), "small.png")
    assert single is not None and "small.png" in single and "upscaled" in single


def test_cifar_arrays_are_resized_through_the_same_preparation() -> None:
    images = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    source = ArraySource(images, torch.tensor([0, 1, 2]), CIFAR10_CLASSES, "arrays")
    assert torch.equal(source.read([2, 0]), images[[2, 0]])  # its own size: as stored
    spec = InputSpec(size=(64, 64))
    bigger = source.at_spec(spec)
    expected, _ = spec.prepare(Image.fromarray(images[1].permute(1, 2, 0).numpy()))
    assert torch.equal(bigger.read([1])[0], expected)
    assert load_batch(bigger).images.shape == (3, 3, 64, 64)


def test_fingerprints_change_with_the_images(image_folder_factory: Callable[..., Path]) -> None:
    root = image_folder_factory(classes=2, per_class=2)
    before = image_folder(root).fingerprint()
    assert image_folder(root, InputSpec(size=(64, 64))).fingerprint() == before
    noise((32, 32), seed=99).save(root / "class_00" / "0009.png")
    assert image_folder(root).fingerprint() != before
    upload = images_from_files([("a.png", encode(noise((32, 32)), "PNG"))])
    other = images_from_files([("a.png", encode(noise((32, 32), seed=1), "PNG"))])
    assert upload.fingerprint() != other.fingerprint()


def test_positions_follow_torchvisions_image_folder_order(
    image_folder_factory: Callable[..., Path],
) -> None:
    from torchvision.datasets import ImageFolder

    root = image_folder_factory(classes=["b", "a", "C", "_x"], per_class=3, suffix=".jpg")
    (root / "a" / "10.jpg").write_bytes((root / "a" / "0000.jpg").read_bytes())
    reference = ImageFolder(str(root))
    source = image_folder(root)
    assert source.class_names == tuple(reference.classes)
    assert [str(path) for path in source.files] == [path for path, _ in reference.samples]
    assert source.label_tensor.tolist() == [label for _, label in reference.samples]
