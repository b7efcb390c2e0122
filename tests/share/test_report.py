"""The HTML report: every picture embedded, nothing fetched, every user string escaped.

The page is parsed with the standard library's HTML parser; the browser test opens it in
Debian's chromium with every request but the file itself refused, and writes a screenshot
(``artifacts/e2e-report.png``; with ``GRADPICK_UPDATE_SCREENSHOTS=1`` also the docs' copy).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import re
import shutil
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from gradpick import attribution, data
from gradpick.cli import report as report_command
from gradpick.data import CIFAR10_CLASSES
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.models import zoo
from gradpick.outputs import inference as infer
from gradpick.outputs import store_format
from gradpick.outputs.stores import infer_to_store
from gradpick.share import export, report
from gradpick.share.record import read_record
from gradpick.trust import CheckOptions, report_dict, run_checks
from tests.serving import screenshot

__all__: list[str] = []

REPO = Path(__file__).resolve().parents[2]
PICKS = [5, 2, 9]
HOSTILE_NAME = '<script>alert("x")</script>&.png'
HOSTILE_SOURCE = "folder <img src=http://example.com/x.png>"
SMALL_CHECKS = CheckOptions(
    methods=("gradient",), layers=2, baselines=("black",), ig_steps=8, deletion_steps=4, top=3
)
DISPLAYED = 128
"""32-pixel inputs are drawn 4x enlarged, whole pixels: the report's panels are 128 pixels."""


class Page(HTMLParser):
    """Every tag's attributes, and the text outside tags, of one document."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(document)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {name: value or "" for name, value in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def images(self) -> list[dict[str, str]]:
        return [attrs for tag, attrs in self.tags if tag == "img"]


def _png(uri: str) -> Image.Image:
    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix), uri[:40]
    picture = Image.open(io.BytesIO(base64.b64decode(uri.removeprefix(prefix), validate=True)))
    assert picture.format == "PNG"
    return picture.convert("RGB")


def _content(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, method: str = "gradient"
) -> export.Export:
    request = GradientRequest.build(
        model, infer.as_model_input(images), PICKS, labels=labels, measure_memory=True
    )
    result = attribution.build(method, {"samples": 4}).attribute(request)
    return export.Export(
        result,
        indices=PICKS,
        images=request.picked_images,
        positions=[100 + index for index in PICKS],
        names=[HOSTILE_NAME, "cat/0002.png", "ship/0009.png"],
        labels=labels[PICKS].tolist(),
        class_names=CIFAR10_CLASSES,
        quantity="loss",
        model={"name": "<b>net</b>", "weights": None, "weights_sha256": "ab" * 32},
        source=export.source_record(HOSTILE_SOURCE, len(images), "test", 0, None, None),
        memory=result.gradients.memory,
    )


@pytest.fixture
def uint8_batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    images = torch.randint(0, 256, (12, 3, 32, 32), dtype=torch.uint8, generator=generator)
    return images, torch.randint(0, 10, (12,), generator=generator)


@pytest.fixture
def document(tiny_cnn: nn.Module, uint8_batch: tuple[torch.Tensor, torch.Tensor]) -> str:
    images, labels = uint8_batch
    probabilities = infer.infer(tiny_cnn, images[PICKS]).probabilities
    return report.build_report(_content(tiny_cnn, images, labels), probabilities)


def test_every_pick_has_its_image_map_and_overlay_embedded_as_pngs(
    document: str, uint8_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, _ = uint8_batch
    found = {
        (int(a["data-pick"]), a["data-panel"]): a
        for a in Page(document).images()
        if "data-pick" in a
    }
    assert set(found) == {(i, p) for i in PICKS for p in ("image", "saliency", "overlay")}
    for index in PICKS:
        pictures = {
            panel: _png(found[index, panel]["src"]) for panel in ("image", "saliency", "overlay")
        }
        for picture in pictures.values():
            assert picture.size == (DISPLAYED, DISPLAYED)
        # The image panel is the picked image itself, each pixel a 4x4 block.
        shown = np.asarray(pictures["image"])
        np.testing.assert_array_equal(shown[::4, ::4], images[index].permute(1, 2, 0).numpy())
        assert (shown == np.repeat(np.repeat(shown[::4, ::4], 4, 0), 4, 1)).all()
        heat = np.asarray(pictures["saliency"])
        assert len(np.unique(heat.reshape(-1, 3), axis=0)) > 10, "a map, not a blank"
        assert not np.array_equal(np.asarray(pictures["overlay"]), shown)


def test_the_page_loads_nothing_from_elsewhere(document: str) -> None:
    page = Page(document)
    for tag, attrs in page.tags:
        if tag == "script":  # data, never code: the report's own record, and no src
            assert attrs == {"type": "application/json", "id": "gradpick-report"}, attrs
            continue
        assert tag not in ("link", "iframe", "object", "embed"), tag
        for name in ("src", "href", "srcset", "poster", "data"):
            value = attrs.get(name)
            if value is not None and name == "src":
                assert value.startswith("data:image/png;base64,"), (tag, value[:60])
            elif value is not None:
                assert not re.match(r"\s*(https?:|//|ftp:)", value), (tag, name, value)
    styles = re.findall(r"<style>(.*?)</style>", document, re.S)
    assert len(styles) == 1
    assert "url(" not in styles[0] and "@import" not in styles[0]
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", document)


def test_user_strings_are_escaped(document: str) -> None:
    page = Page(document)
    scripts = [attrs for tag, attrs in page.tags if tag == "script"]
    assert scripts == [{"type": "application/json", "id": "gradpick-report"}]  # the record
    assert '<script>alert("x")' not in document and "<b>net</b>" not in document
    text = "".join(page.text)
    assert HOSTILE_NAME in text and HOSTILE_SOURCE in text and "<b>net</b>" in text
    # The hostile source's <img> is text, not a picture: only the report's own images exist.
    assert all(a["src"].startswith("data:") for a in page.images())


def test_the_facts_of_each_pick(
    tiny_cnn: nn.Module, uint8_batch: tuple[torch.Tensor, torch.Tensor], document: str
) -> None:
    images, labels = uint8_batch
    probabilities = infer.infer(tiny_cnn, images[PICKS]).probabilities
    sections = re.findall(r'<section class="pick" data-pick="(\d+)">(.*?)</section>', document)
    assert [int(index) for index, _ in sections] == PICKS
    for row, (_, section) in enumerate(sections):
        text = "".join(Page(section).text)
        predicted = int(probabilities[row].argmax())
        assert (
            f"predicted {CIFAR10_CLASSES[predicted]} ({probabilities[row, predicted]:.1%})" in text
        )
        assert f"label{CIFAR10_CLASSES[int(labels[PICKS[row]])]}" in text
        verdict = "correct" if predicted == int(labels[PICKS[row]]) else "wrong"
        assert verdict in text
        bars = re.findall(r'<span style="width:([\d.]+)%">', section)
        top = probabilities[row].sort(descending=True).values[:5]
        assert np.allclose([float(b) for b in bars], (100 * top).tolist(), atol=0.06)
        assert f"position{100 + PICKS[row]}" in text


def test_model_method_and_readouts_are_stated(document: str) -> None:
    text = " ".join(Page(document).text)
    assert "Gradient (gradient)" in text
    assert "ab" * 32 in text
    assert "saved for backward" in text and "not measured" not in text
    assert "12 images" in text and "at batch indices [5, 2, 9]" in text
    assert "Trust checks" not in text


def test_method_settings_and_model_card(
    tiny_cnn: nn.Module, uint8_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, labels = uint8_batch
    probabilities = infer.infer(tiny_cnn, images[PICKS]).probabilities
    card = {
        "architecture": "Tiny <CNN>",
        "test_accuracy": 0.875,
        "per_class_accuracy": {"cat": 0.5},
    }
    document = report.build_report(
        _content(tiny_cnn, images, labels, "smoothgrad"), probabilities, card=card, title="Mine"
    )
    text = " ".join(Page(document).text)
    assert "SmoothGrad (smoothgrad)" in text
    assert "samples = 4" in text and "noise = 0.15" in text
    assert "Tiny <CNN>" in text and "87.50%" in text and "cat 50.0%" in text
    assert re.search(r"<title>Mine", document)


def test_the_trust_summary_when_checks_ran(
    tiny_cnn: nn.Module, uint8_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, labels = uint8_batch
    floats = infer.as_model_input(images)
    trust = run_checks(tiny_cnn, floats, PICKS, options=SMALL_CHECKS)
    probabilities = infer.infer(tiny_cnn, images[PICKS]).probabilities
    document = report.build_report(_content(tiny_cnn, images, labels), probabilities, trust=trust)
    text = " ".join(Page(document).text)
    assert "Trust checks" in text
    record = report_dict(trust)
    last = record["randomisation"]["gradient"]["steps"][-1]["spearman"]
    assert f"{last['mean']:.3f} ± {last['std']:.3f}" in text
    for row in record["completeness"]:
        assert f"{row['relative_error']:.2%}" in text
    deletion = record["faithfulness"]["methods"]["gradient"]["deletion_auc"]
    assert f"{deletion['mean']:.3f}" in text


def test_probabilities_must_match_the_picks(
    tiny_cnn: nn.Module, uint8_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, labels = uint8_batch
    with pytest.raises(InputError, match="probabilities of the 3 picked"):
        report.build_report(_content(tiny_cnn, images, labels), torch.rand(2, 10))


def test_write_report_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "r.html"
    target.write_text("old")
    assert report.write_report(target, "<p>new</p>") == target
    assert target.read_text() == "<p>new</p>"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.html"]
    with pytest.raises(InputError, match=r"\.html"):
        report.write_report(tmp_path / "r.txt", "x")


def _command(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    report_command.register(parser.add_subparsers())
    args = parser.parse_args(["report", *argv])
    return int(args.handler(args))


def test_the_command_writes_a_report(
    generated_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "picks.html"
    status = _command(
        "--data", str(generated_folder), "--model", "tutorial", "--size", "20",
        "--indices", "1, 4", "--method", "smoothgrad", "--setting", "samples=3", "--out", str(out),
    )  # fmt: skip
    assert status == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = Page(out.read_text())
    shown = {(int(a["data-pick"]), a["data-panel"]) for a in page.images() if "data-pick" in a}
    assert shown == {(i, p) for i in (1, 4) for p in ("image", "saliency", "overlay")}
    text = " ".join(page.text)
    assert "samples = 3" in text and "tutorial" in text
    assert not list(tmp_path.glob("*.partial"))


def test_the_command_refuses_bad_options_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--out must end in \.html"):
        _command("--indices", "1", "--out", str(tmp_path / "r.pdf"))
    with pytest.raises(InputError, match="samples must be a whole number of at least 1"):
        _command(
            "--indices",
            "1",
            "--method",
            "smoothgrad",
            "--setting",
            "samples=0",
            "--out",
            str(tmp_path / "r.html"),
        )


# ----------------------------------------------------------------------------- in a browser


def _showcase(root: Path) -> str:
    """A report of real CIFAR-10 picks under the best shipped model, with the trust checks."""
    loaded = zoo.load_model("resnet20", device="cpu")
    source = data.open_source(str(root), "test", loaded.spec)
    batch = data.load_batch(source, size=200, seed=0)
    record = export.source_record(source.description, len(batch), "test", 0, 200, 0)
    checks = CheckOptions(
        methods=("gradient", "integrated_gradients"), layers=3, baselines=("black",)
    )
    return report.of_batch(
        loaded, batch, [3, 17, 42], attribution.SmoothGrad(samples=8), checks=checks, source=record
    )


@pytest.mark.e2e
def test_chromium_opens_the_report_offline(
    tmp_path: Path, cifar_like_factory: Callable[[int], Path]
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from gradpick.bench.serving import CHROMIUM_ARGS

    shared = REPO.parent / "shared" / "data" / "cifar10-jpg"
    configured = os.environ.get(data.CIFAR10_DIR_ENV)
    root = Path(configured) if configured else shared
    if not (root / "test").is_dir():
        root = cifar_like_factory(50)
    path = tmp_path / "report.html"
    report.write_report(path, _showcase(root))
    page_url = path.as_uri()
    refused: list[str] = []
    failed: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.on("requestfailed", lambda request: failed.append(request.url))

        def only_the_file(route: object) -> None:
            url = route.request.url  # type: ignore[attr-defined]
            if url == page_url:
                route.continue_()  # type: ignore[attr-defined]
            else:
                refused.append(url)
                route.abort()  # type: ignore[attr-defined]

        page.route("**/*", only_the_file)
        page.goto(page_url)
        drawn = page.evaluate(
            "() => [...document.images].map(i => i.complete && i.naturalWidth > 0)"
        )
        screenshot(page, "report", docs=True, settle_ms=0, full_page=True)
        page.emulate_media(media="print")
        printed = page.evaluate("() => getComputedStyle(document.querySelector('details')).display")
        browser.close()
    assert refused == [] and failed == []
    assert len(drawn) >= 10 and all(drawn)
    assert printed == "none", "the JSON is left out of a printout"


def test_of_batch_reports_a_batch_with_its_checks(generated_folder: Path) -> None:
    loaded = zoo.load_model("tutorial", device="cpu")
    batch = data.load_batch(data.open_source(str(generated_folder), "test", loaded.spec), size=16)
    document = report.of_batch(
        loaded, batch, [2, 8], target="logit", classes=3, checks=SMALL_CHECKS
    )
    page = Page(document)
    assert {int(a["data-pick"]) for a in page.images() if "data-pick" in a} == {2, 8}
    text = " ".join(page.text)
    assert "logit[cat] of class cat" in text and "Trust checks" in text
    assert f"{len(batch)} images" in text and batch.names[8] in text


def test_a_sigmoid_models_report_shows_each_labels_own_probability(
    generated_folder: Path,
) -> None:
    loaded = zoo.load_model("tutorial", device="cpu", output="sigmoid")
    batch = data.load_batch(data.open_source(str(generated_folder), "test", loaded.spec), size=8)
    document = report.of_batch(loaded, batch, [2], target="logit", classes=3)
    table = document.split('data-role="probabilities">')[1].split("</table>")[0]
    shown = re.findall(r'<td class="num">([0-9.]+%)</td>', table)
    with torch.no_grad():
        logits = loaded.module(batch.images[2:3].float() / 255)[0].double()
    own = (1 / (1 + torch.exp(-logits))).sort(descending=True).values[: len(shown)]
    assert shown == [f"{value:.1%}" for value in own.tolist()]
    assert sum(float(text.rstrip("%")) for text in shown) != pytest.approx(100, abs=1)


def _slices_file() -> dict[str, object]:
    """A slices run's JSON: slice 1 verified with a one-cell peak in its 4x4 mean map, slice 2
    with no errors (untested)."""
    peak = [[0.0] * 4 for _ in range(4)]
    peak[1][2] = 0.8
    return {
        "model": "m",
        "fingerprint": "f",
        "rows": 300,
        "errors": 40,
        "method": "gradcam",
        "slices": [
            {
                "rank": 1,
                "size": 30,
                "errors": 27,
                "error_rate": 0.9,
                "positions": list(range(30)),
                "description": "27 error(s) called frog <b>(27)</b>",
                "mean_map": peak,
                "effect": {
                    "evidence_change": 0.91,
                    "random_change": 0.03,
                    "ratio": 33.1,
                    "p_value": 1.3e-48,
                    "tested": 27,
                    "verified": True,
                },
                "verified": True,
            },
            {
                "rank": 2,
                "size": 12,
                "errors": 0,
                "error_rate": 0.0,
                "positions": list(range(30, 42)),
                "description": "correctly called cat.",
                "mean_map": [[0.5]],
                "effect": None,
                "verified": False,
            },
        ],
    }


def test_the_slices_section_ranks_describes_verifies_and_draws_each_slice(
    tiny_cnn: nn.Module, uint8_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    import matplotlib

    images, labels = uint8_batch
    probabilities = infer.infer(tiny_cnn, images[PICKS]).probabilities
    content = _content(tiny_cnn, images, labels)
    assert "<h2>Slices</h2>" not in report.build_report(content, probabilities)
    kept = _slices_file()
    document = report.build_report(
        content, probabilities, slices=kept, slice_verdicts={1: "model wrong"}
    )
    assert "<h2>Slices</h2>" in document
    section = document[document.index("<h2>Slices</h2>") : document.index("<h2>All fields</h2>")]
    text = " ".join(Page(section).text)
    assert "2 slices of 40 errors among 300 images, 1 verified" in text
    # The ranked table: each slice's row, its figures as the run measured them.
    rows = re.findall(r"<tr>(.*?)</tr>", section)[1:]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows]
    assert cells == [
        ["1", "yes", "model wrong", "30", "27", "90%", "91%", "3%", "33.1", "1.3e-48"],
        ["2", "no", "", "12", "0", "0%", "", "", "", ""],
    ]
    # The cards: the description escaped, the verification line, the verdict.
    assert "27 error(s) called frog &lt;b&gt;(27)&lt;/b&gt;" in section
    assert (
        "<b>Verified</b>: removing the evidence changed 91% of 27 calls, the same area at "
        "random 3% (x33.1, p = 1.3e-48)." in section
    )
    assert "No errors to test." in section and "Judged <b>model wrong</b>." in section
    # The mean map: 4x4 cells drawn 24 pixels each, the peak cell at the colour scale's top
    # (inferno's brightest), every other cell its darkest.
    (mean,) = [a for a in Page(section).images() if a.get("data-slice") == "1"]
    picture = np.asarray(_png(mean["src"]))
    assert picture.shape == (96, 96, 3)
    inferno = matplotlib.colormaps["inferno"]
    top = np.round(np.asarray(inferno(1.0)[:3]) * 255)
    bottom = np.round(np.asarray(inferno(0.0)[:3]) * 255)
    cells_drawn = picture[12::24, 12::24].astype(float)
    assert np.abs(cells_drawn[1, 2] - top).max() <= 1
    others = np.delete(cells_drawn.reshape(16, 3), 1 * 4 + 2, axis=0)
    assert np.abs(others - bottom).max() <= 1
    # The embedded record keeps each slice's figures, not its members.
    record = read_record(document)
    assert [row["rank"] for row in record["slices"]] == [1, 2]
    assert record["slices"][0]["effect"]["ratio"] == 33.1
    assert "positions" not in record["slices"][0]


def test_the_command_adds_the_slices_of_a_store_and_refuses_a_store_without(
    generated_folder: Path, tmp_path: Path
) -> None:
    loaded = zoo.load_model("tutorial")
    source = data.open_source(str(generated_folder / "test"), spec=loaded.spec)
    infer_to_store(loaded, source, range(12), tmp_path / "outputs")
    out = tmp_path / "picks.html"
    arguments = ["--data", str(generated_folder), "--model", "tutorial", "--size", "8"]
    arguments += ["--indices", "1", "--slices", str(tmp_path / "outputs"), "--out", str(out)]
    with pytest.raises(InputError, match="no slices of this store in .*run gradpick slices"):
        _command(*arguments)
    assert not out.exists()
    metadata = store_format.open_store(tmp_path / "outputs").metadata
    kept = {
        **_slices_file(),
        "model": metadata["model"]["identity"],
        "fingerprint": metadata["source"]["fingerprint"],
    }
    (tmp_path / "outputs.slices.json").write_text(json.dumps(kept))
    assert _command(*arguments) == 0
    document = out.read_text()
    assert "<h2>Slices</h2>" in document
    assert "2 slices of 40 errors among 300 images, 1 verified" in document
    assert [row["rank"] for row in read_record(document)["slices"]] == [1, 2]
