"""All checks at once: independent of how the picks are batched, and a JSON-ready report."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.trust.engine import METHODS, MethodSettings
from gradpick.trust.faithfulness import RANDOM
from gradpick.trust.report import CheckOptions, TrustReport, report_dict, run_checks

QUICK = CheckOptions(
    settings=MethodSettings(samples=4, steps=8, seed=2),
    layers=2,
    ig_steps=8,
    deletion_steps=4,
    seed=2,
)


def per_image(report: TrustReport) -> dict[str, torch.Tensor]:
    """Every per-image number of a report, one row per pick."""
    values = {"classes": report.classes.double(), "noise": report.noise_std}
    for method, curve in report.randomisation.items():
        values[f"{method} map"] = curve.original.flatten(1)
        for position, step in enumerate(curve.steps):
            values[f"{method} {position}"] = torch.stack([step.spearman, step.ssim], dim=1)
            values[f"{method} {position} map"] = step.maps.flatten(1)
    for baseline in QUICK.baselines:
        rows = [row for row in report.completeness if row.baseline == baseline]
        values[baseline] = torch.tensor([[row.attribution_sum, row.difference] for row in rows])
    for name, curves in report.faithfulness.items():
        values[name] = torch.cat([curves.deletion, curves.insertion], dim=1)
    values["top"] = report.class_maps.top_maps.flatten(1)
    values["contrast"] = report.class_maps.contrast_maps.flatten(1)
    return values


def test_results_do_not_depend_on_how_the_picks_are_batched(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    together = per_image(run_checks(float64_cnn, float64_images, [4, 1, 3], options=QUICK))
    first = per_image(run_checks(float64_cnn, float64_images, [4], options=QUICK))
    rest = per_image(run_checks(float64_cnn, float64_images, [1, 3], options=QUICK))
    assert together.keys() == first.keys()
    for name, values in together.items():
        joined = torch.cat([first[name], rest[name]])
        assert torch.allclose(values, joined, rtol=1e-9, atol=1e-12, equal_nan=True), name


def test_the_report_is_plain_json_with_every_check(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    record = report_dict(run_checks(float64_cnn, float64_images, [0, 5], options=QUICK))
    text = json.dumps(record, allow_nan=False)
    assert json.loads(text) == record
    assert record["indices"] == [0, 5]
    assert set(record["randomisation"]) == set(METHODS)
    steps = record["randomisation"]["gradient"]["steps"]
    assert [step["layer"] for step in steps] == ["6", "3"]
    assert set(steps[0]) >= {"layer", "spearman", "ssim", "spearman_per_image"}
    assert set(steps[0]["ssim"]) == {"mean", "std"}
    assert len(record["completeness"]) == 2 * len(QUICK.baselines)
    row = record["completeness"][0]
    assert row["difference"] == pytest.approx(row["output"] - row["baseline_output"])
    assert row["steps"] == 8 and row["baseline"] == "black"
    faithful = record["faithfulness"]
    assert len(faithful["fractions"]) == 5 and RANDOM not in faithful["methods"]
    assert set(faithful["methods"]["smoothgrad"]) >= {
        "deletion_auc",
        "insertion_auc",
        "random_deletion_auc",
        "random_insertion_auc",
    }
    assert record["settings"]["smoothgrad"]["samples"] == 4
    spread = [float(image.max() - image.min()) for image in float64_images[[0, 5]]]
    noise = record["settings"]["smoothgrad"]["noise_std_per_image"]
    assert noise == pytest.approx([0.15 * value for value in spread])
    assert len(record["class_maps"]["top_classes"][0]) == 3


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"samples": 0}, "samples must be a whole number from 1 to 1,024"),
        ({"samples": 5000}, "samples must be a whole number from 1 to 1,024"),
        ({"steps": 0}, "steps must be a whole number from 1"),
        ({"noise": 1.5}, "fraction of each image's range"),
        ({"seed": -1}, "seed must be a whole number of at least 0"),
    ],
)
def test_bad_method_settings_are_refused(settings: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        MethodSettings(**settings)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"methods": ("gradient", "occlusion")}, "Unknown attribution method 'occlusion'"),
        ({"methods": ()}, "at least one attribution method"),
        ({"layers": 0}, "layers to randomise must be a whole number of at least 1"),
        ({"baselines": ()}, "at least one baseline"),
        ({"baselines": ("grey",)}, "Unknown baseline 'grey'"),
        ({"ig_steps": 0}, "Integrated Gradients steps must be"),
        ({"tolerance": 0}, "tolerance is a relative error"),
        ({"deletion_steps": 0}, "Deletion and insertion steps"),
        ({"randomisation": "random"}, "Unknown randomisation mode"),
        ({"top": 0}, "top classes must be a whole number of at least 1"),
    ],
)
def test_bad_options_are_refused_before_any_work(options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        CheckOptions(**options)


def test_the_report_has_road_and_class_sensitivity_independent_of_batching(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    options = CheckOptions(
        methods=("gradient", "smoothgrad"),
        settings=MethodSettings(samples=3, seed=2),
        layers=1,
        ig_steps=8,
        deletion_steps=4,
        road_shares=(0.0, 0.3, 0.6),
        seed=2,
    )
    together = run_checks(float64_cnn, float64_images, [4, 1], options=options)
    first = run_checks(float64_cnn, float64_images, [4], options=options)
    rest = run_checks(float64_cnn, float64_images, [1], options=options)
    for method, curves in together.road.items():
        for name in ("morf", "lerf"):
            joined = torch.cat(
                [getattr(first.road[method], name), getattr(rest.road[method], name)]
            )
            assert torch.allclose(getattr(curves, name), joined, rtol=1e-9, atol=1e-12)
    record = report_dict(together)
    assert json.loads(json.dumps(record, allow_nan=False)) == record
    rows = record["class_sensitivity"]
    assert len(rows) == 2 * 2 * 2  # methods x kinds x picks
    assert set(rows[0]) == {
        "index",
        "method",
        "kind",
        "class",
        "other_class",
        "spearman",
        "ssim",
        "insensitive",
    }
    assert {(row["method"], row["kind"]) for row in rows} == {
        (method, kind) for method in ("gradient", "smoothgrad") for kind in ("runner_up", "random")
    }
    assert all(row["class"] != row["other_class"] for row in rows)
    assert [row["class"] for row in rows[:2]] == record["classes"]
    imputed = record["road"]
    assert imputed["fractions"] == [0.0, 0.3, 0.6]
    smooth = imputed["methods"]["smoothgrad"]
    assert set(smooth["morf_auc"]) == {"mean", "std"}
    assert len(smooth["lerf_auc_per_image"]) == 2 and len(smooth["morf_curve"]) == 3
    assert len(smooth["morf_curve_per_image"]) == 2
    aucs = zip(smooth["lerf_auc_per_image"], smooth["morf_auc_per_image"], strict=True)
    gap = [lerf - morf for lerf, morf in aucs]
    assert smooth["gap_per_image"] == pytest.approx(gap)
    assert record["settings"]["road"] == {"shares": [0.0, 0.3, 0.6], "noise_std": 0.01}
    assert {"road", "class_sensitivity"} <= set(record["milliseconds"])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"road_shares": (0.5,)}, "ROAD shares"),
        ({"road_shares": (0.0, 1.0)}, "ROAD shares"),
        ({"road_noise": -1.0}, "ROAD's noise"),
    ],
)
def test_bad_road_options_are_refused_before_any_work(options: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        CheckOptions(**options)
