"""Results display as pictures in Jupyter: ``_repr_html_`` draws one embedded PNG map per pick."""

from __future__ import annotations

import base64
import io
import re

import numpy as np
import torch
from PIL import Image
from torch import nn

from gradpick import attribution
from gradpick.gradients.engine import input_gradients
from gradpick.gradients.timing import compare_strategies
from gradpick.show import notebook
from gradpick.trust import CheckOptions, run_checks

__all__: list[str] = []

PICKS = [3, 0, 11]
IMAGE_SOURCES = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _pictures(html: str) -> list[np.ndarray]:
    """Every embedded PNG of ``html``, decoded."""
    found = []
    for encoded in IMAGE_SOURCES.findall(html):
        picture = Image.open(io.BytesIO(base64.b64decode(encoded, validate=True)))
        assert picture.format == "PNG"
        found.append(np.asarray(picture.convert("RGB")))
    return found


def _brightest(picture: np.ndarray) -> tuple[int, int]:
    """The (row, column) of the brightest pixel of a 4x-enlarged map, in input pixels."""
    luminance = picture[::4, ::4].astype(float).sum(axis=2)
    row, column = np.unravel_index(int(luminance.argmax()), luminance.shape)
    return int(row), int(column)


def test_a_gradient_result_draws_each_picks_map(
    tiny_cnn: nn.Module, random_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, labels = random_batch
    result = input_gradients(tiny_cnn, images, PICKS, labels=labels)
    html = result._repr_html_()
    pictures = _pictures(html)
    assert len(pictures) == len(PICKS)
    for picture, gradient in zip(pictures, result.gradients, strict=True):
        assert picture.shape == (128, 128, 3)
        # The brightest spot of each map is among that pick's largest |gradient| (the top
        # half-percent share the brightest colour).
        saliency = gradient.abs().amax(dim=0)
        assert saliency[_brightest(picture)] >= saliency.flatten().quantile(0.99)
    for index in PICKS:
        assert f"#{index} " in html
    assert "recompute" in html and "gradient step" in html


def test_an_attribution_shows_its_method_and_maps(
    tiny_cnn: nn.Module, random_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, labels = random_batch
    result = attribution.attribute(
        tiny_cnn, images, PICKS, labels=labels, method="smoothgrad", samples=4
    )
    html = result._repr_html_()
    assert len(_pictures(html)) == len(PICKS)
    assert "smoothgrad" in html and "samples = 4" in html and "whole method" in html
    plain = input_gradients(tiny_cnn, images, PICKS, labels=labels)._repr_html_()
    assert _pictures(plain)[0].tobytes() != _pictures(html)[0].tobytes()


def test_a_trust_report_draws_trained_and_randomised_maps(
    tiny_cnn: nn.Module, random_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, _ = random_batch
    options = CheckOptions(
        methods=("gradient", "gradient_x_input"),
        layers=1,
        baselines=("black",),
        ig_steps=8,
        deletion_steps=4,
        top=2,
    )
    html = run_checks(tiny_cnn, images, PICKS[:2], options=options)._repr_html_()
    assert len(_pictures(html)) == 2 * 2 * 2  # two methods x two picks x (trained, random)
    captions = re.findall(r"<figcaption[^>]*>#(\d+) ([^<]+)</figcaption>", html)
    assert captions == [
        (str(index), state)
        for _ in options.methods
        for state in ("trained", "1 layers random")
        for index in PICKS[:2]
    ]
    assert "Completeness" in html and "Faithfulness" in html


def test_a_comparison_is_a_table(
    tiny_cnn: nn.Module, random_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    images, labels = random_batch
    runs = compare_strategies(
        tiny_cnn, images, PICKS, labels, strategies=["recompute", "summed"], repeats=1,
        min_seconds=0.0,
    )  # fmt: skip
    table = notebook.comparison(runs)
    assert table._repr_html_() == str(table)
    rows = re.findall(r"<tr><td>(\w+)</td>", table)
    assert rows == ["floor", "recompute", "summed"]


def test_method_names_are_escaped(
    tiny_cnn: nn.Module, random_batch: tuple[torch.Tensor, torch.Tensor]
) -> None:
    name = "<b>x</b>"
    images, labels = random_batch
    result = attribution.attribute(tiny_cnn, images, PICKS, labels=labels)
    shown = notebook.attribution_html(type(result)(**{**result.__dict__, "method": name}))
    assert name not in shown and "&lt;b&gt;x&lt;/b&gt;" in shown
