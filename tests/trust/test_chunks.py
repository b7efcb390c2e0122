"""The trust checks in chunks: the same report as one run over all the picks."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.trust.chunks import run_checks_in_chunks
from gradpick.trust.engine import MethodSettings
from gradpick.trust.report import CheckOptions, report_dict, run_checks

OPTIONS = CheckOptions(
    methods=("gradient", "smoothgrad"),
    settings=MethodSettings(samples=3, steps=8, seed=2),
    layers=2,
    baselines=("black", "blurred"),
    ig_steps=8,
    deletion_steps=4,
    road_shares=(0.0, 0.5),
    seed=2,
)


def assert_same(first: Any, second: Any, where: str = "") -> None:
    """Equal JSON values, numbers to 1e-9 relative (a batch of 2 and of 5 may round apart)."""
    if isinstance(first, dict):
        assert first.keys() == second.keys(), where
        for key in first:
            if key != "milliseconds":
                assert_same(first[key], second[key], f"{where}.{key}")
    elif isinstance(first, list):
        assert len(first) == len(second), where
        for position, (a, b) in enumerate(zip(first, second, strict=True)):
            assert_same(a, b, f"{where}[{position}]")
    elif isinstance(first, float) and not isinstance(second, bool):
        assert second is not None and math.isclose(first, second, rel_tol=1e-9, abs_tol=1e-12), (
            where
        )
    else:
        assert first == second, where


def test_chunks_give_the_report_of_one_run(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [4, 1, 3, 0, 5]
    whole = run_checks(float64_cnn, float64_images, indices, options=OPTIONS)
    seen: list[tuple[int, int]] = []
    chunked = run_checks_in_chunks(
        float64_cnn, float64_images, indices, None, OPTIONS, lambda *step: seen.append(step), 2
    )
    assert chunked.indices == tuple(indices)
    assert_same(report_dict(whole), report_dict(chunked))
    for method in OPTIONS.methods:
        one, other = whole.randomisation[method], chunked.randomisation[method]
        assert torch.allclose(one.original, other.original, rtol=1e-9, atol=1e-12)
        assert torch.allclose(one.steps[-1].maps, other.steps[-1].maps, rtol=1e-9, atol=1e-12)
    assert torch.allclose(whole.class_maps.top_maps, chunked.class_maps.top_maps, rtol=1e-9)
    # Three chunks of two randomised layers each: one bar from 1 of 6 to 6 of 6.
    assert seen == [(done, 6) for done in range(1, 7)]


def test_one_class_per_pick_is_split_with_the_chunks(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    options = CheckOptions(
        methods=("gradient", "integrated_gradients"), layers=1, baselines=("black",), ig_steps=8
    )
    classes = [3, 7, 1]
    report = run_checks_in_chunks(float64_cnn, float64_images, [0, 1, 2], classes, options, chunk=2)
    assert report.classes.tolist() == classes
    assert [row.target_class for row in report.completeness] == classes
    with pytest.raises(InputError, match="chunk size"):
        run_checks_in_chunks(float64_cnn, float64_images, [0], options=options, chunk=0)


def test_the_joined_report_keeps_every_maps_and_name(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    indices = [2, 5, 0]
    whole = run_checks(float64_cnn, float64_images, indices, options=OPTIONS)
    chunked = run_checks_in_chunks(float64_cnn, float64_images, indices, None, OPTIONS, chunk=2)
    assert chunked.class_maps.indices == tuple(indices)
    assert torch.allclose(
        whole.class_maps.contrast_maps, chunked.class_maps.contrast_maps, rtol=1e-9, atol=1e-12
    )
    for method in OPTIONS.methods:
        assert chunked.randomisation[method].method == method
    for one, other in zip(whole.class_sensitivity, chunked.class_sensitivity, strict=True):
        assert (other.method, other.kind, other.indices) == (one.method, one.kind, one.indices)
        assert torch.allclose(one.other_maps, other.other_maps, rtol=1e-9, atol=1e-12)


def test_picks_that_fit_in_one_chunk_are_one_run(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    options = CheckOptions(
        methods=("gradient", "integrated_gradients"), layers=1, baselines=("black",), ig_steps=4
    )
    seen: list[tuple[int, int]] = []
    alone = run_checks_in_chunks(
        float64_cnn, float64_images, [3, 1], None, options, lambda *step: seen.append(step)
    )  # 8 picks a chunk by default
    assert_same(report_dict(run_checks(float64_cnn, float64_images, [3, 1], options=options)),
                report_dict(alone))  # fmt: skip
    assert alone.randomisation["gradient"].method == "gradient"
    assert (alone.class_sensitivity[0].method, alone.class_sensitivity[1].kind) == (
        "gradient", "random",
    )  # fmt: skip
    assert seen == [(1, 1)]


def test_a_chunk_size_below_one_is_refused_by_name(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    with pytest.raises(InputError) as refused:
        run_checks_in_chunks(float64_cnn, float64_images, [0], chunk=-2)
    assert str(refused.value) == "The chunk size must be a whole number of at least 1; got -2."


def test_one_class_for_every_pick_and_one_each_over_chunks_of_one(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    options = CheckOptions(
        methods=("gradient", "integrated_gradients"), layers=1, baselines=("black",), ig_steps=4
    )
    every = run_checks_in_chunks(float64_cnn, float64_images, [0, 1, 2], 6, options, chunk=2)
    assert every.classes.tolist() == [6, 6, 6]
    each = run_checks_in_chunks(float64_cnn, float64_images, [4, 5], [3, 7], options, chunk=1)
    assert each.classes.tolist() == [3, 7]
    assert [row.target_class for row in each.completeness] == [3, 7]
