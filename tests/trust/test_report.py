"""All checks at once: independent of how the picks are batched, and a JSON-ready report; the
settings every check shares; a report built by hand and its JSON field by field."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from torch import nn

from gradpick.errors import InputError
from gradpick.trust import engine
from gradpick.trust.completeness import Completeness, completeness
from gradpick.trust.contrastive import ClassMaps
from gradpick.trust.engine import METHODS, MethodSettings
from gradpick.trust.faithfulness import RANDOM, Curves, attribution_order, faithfulness
from gradpick.trust.randomisation import RandomisationCurve, RandomisationStep, randomisation_test
from gradpick.trust.report import CheckOptions, TrustReport, mean_and_std, report_dict, run_checks
from gradpick.trust.road import RoadCurves, road
from gradpick.trust.sensitivity import ClassSensitivity, class_sensitivity

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
        ({"methods": ("gradient", "lime")}, "Unknown attribution method 'lime'"),
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


def test_the_settings_default_to_the_attribution_methods_own() -> None:
    # attribution.attribute's defaults: 16 samples, noise 0.15, 32 steps, seed 0.
    assert (engine._registered_default("samples"), engine._registered_default("steps")) == (16, 32)
    settings = MethodSettings()
    assert (settings.samples, settings.noise, settings.steps, settings.seed) == (16, 0.15, 32, 0)
    assert settings.layer is None


def test_the_settings_a_user_chose_keep_the_checks_own_fields() -> None:
    chosen = {"samples": 5, "noise": 0.2, "steps": 7, "baseline": 0.3, "layer": "conv1"}
    assert MethodSettings.from_chosen(chosen) == MethodSettings(
        samples=5, noise=0.2, steps=7, layer="conv1"
    )


def test_settings_at_their_bounds_are_taken() -> None:
    low = MethodSettings(samples=1, steps=1, noise=0, seed=0)
    high = MethodSettings(samples=1024, steps=4096, noise=1, seed=2**40)
    assert (low.samples, low.steps, high.samples, high.steps) == (1, 1, 1024, 4096)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"samples": True}, "SmoothGrad samples must be a whole number from 1 to 1,024; got True."),
        (
            {"steps": 4097},
            "Integrated Gradients steps must be a whole number from 1 to 4,096; got 4097.",
        ),
        ({"noise": "0.1"}, "SmoothGrad noise must be a number; got '0.1'."),
        ({"noise": False}, "SmoothGrad noise must be a number; got False."),
        (
            {"noise": float("nan")},
            "SmoothGrad noise is a fraction of each image's range (max - min): give a number "
            "from 0 to 1; got nan.",
        ),
        (
            {"noise": -0.01},
            "SmoothGrad noise is a fraction of each image's range (max - min): give a number "
            "from 0 to 1; got -0.01.",
        ),
        ({"seed": 1.5}, "The seed must be a whole number of at least 0; got 1.5."),
        ({"layer": 3}, "The layer is a module's dotted name; got 3."),
    ],
)
def test_bad_settings_are_refused_with_what_was_given(settings: dict, message: str) -> None:
    with pytest.raises(InputError) as refused:
        MethodSettings(**settings)
    assert str(refused.value) == message


def test_each_method_gets_its_own_settings_and_only_layer_methods_the_layer() -> None:
    settings = MethodSettings(samples=5, noise=0.2, steps=7, seed=3, layer="conv1")
    assert settings.of("gradient") == {}
    assert settings.of("smoothgrad") == {"samples": 5, "noise": 0.2, "seed": 3}
    assert settings.of("integrated_gradients") == {"steps": 7}
    assert settings.of("gradcam") == {}
    assert (settings.layer_of("gradcam"), settings.layer_of("smoothgrad")) == ("conv1", None)


def test_methods_are_named_once_in_the_order_given() -> None:
    assert engine.check_methods(["smoothgrad", "gradient", "smoothgrad"]) == (
        "smoothgrad", "gradient",
    )  # fmt: skip
    with pytest.raises(InputError) as refused:
        engine.check_methods([])
    assert str(refused.value).startswith("Choose at least one attribution method: gradient, ")
    with pytest.raises(InputError) as refused:
        engine.check_methods(["gradient", "lime"])
    assert str(refused.value) == (
        "Unknown attribution method 'lime'; use one of gradient, gradient_x_input, smoothgrad, "
        "integrated_gradients, gradcam, gradcam_plus_plus, hirescam, xgradcam, layercam, "
        "scorecam, occlusion, rise."
    )


@pytest.mark.parametrize("rows", [3, 5])
def test_logits_of_another_batch_size_are_refused(rows: int) -> None:
    """Two-dimensional, but one row short or over: not the batch's logits."""

    class Rows(nn.Module):
        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return torch.zeros(rows, 10)

    with pytest.raises(InputError) as refused:
        engine.logits_of(Rows().eval(), torch.zeros(4, 3, 2, 2))
    assert str(refused.value) == (
        f"The model must map [N, C, H, W] to [N, classes]; it returned ({rows}, 10)."
    )


def test_saliency_scaled_by_its_peak_and_an_all_zero_map_left_at_zero() -> None:
    maps = torch.tensor([[[[1.0, -4.0]], [[-2.0, 3.0]]], [[[0.0, 0.0]], [[0.0, 0.0]]]])
    assert engine.saliency(maps).tolist() == [[[2.0, 4.0]], [[0.0, 0.0]]]
    scaled = engine.scaled_saliency(maps)
    assert scaled.dtype == torch.float64 and scaled.tolist() == [[[0.5, 1.0]], [[0.0, 0.0]]]


def test_noise_std_is_the_fraction_of_each_picks_range() -> None:
    images = torch.zeros(3, 1, 2, 2)
    images[0, 0, 0, 0], images[2, 0, 1, 1], images[2, 0, 0, 1] = 0.8, 0.6, -0.2
    spread = engine.noise_std(images, [2, 0], MethodSettings(noise=0.25))
    assert spread.dtype == torch.float64 and spread.tolist() == pytest.approx([0.2, 0.2])


def test_a_model_in_training_mode_is_served_as_an_eval_copy(tiny_bn_cnn: nn.Module) -> None:
    assert engine.served_view(tiny_bn_cnn) is tiny_bn_cnn
    training = tiny_bn_cnn.train()
    served = engine.served_view(training)
    assert served is not training and training.training and not served.training
    assert not any(module.training for module in served.modules())


def test_held_classes_given_one_for_all_or_one_each(
    float64_cnn: nn.Module, float64_images: torch.Tensor
) -> None:
    assert engine.held_classes(float64_cnn, float64_images, [1, 2], 9).tolist() == [9, 9]
    given = engine.held_classes(float64_cnn, float64_images, [1, 2], torch.tensor([0, 4]))
    assert given.dtype == torch.long and given.tolist() == [0, 4]
    with pytest.raises(InputError) as refused:
        engine.held_classes(float64_cnn, float64_images, [1, 2], [1, 2, 3])
    assert str(refused.value) == "Give one class, or one class per picked image (2)."
    with pytest.raises(InputError) as refused:
        engine.held_classes(float64_cnn, float64_images, [1, 2], [-1, 2])
    assert str(refused.value) == (
        "Class -1 is out of range for a model with 10 outputs (valid classes 0 to 9)."
    )


def test_a_model_that_does_not_return_one_row_per_image_is_refused() -> None:
    with pytest.raises(InputError) as refused:
        engine.logits_of(nn.Flatten(0), torch.rand(2, 3, 4, 4))
    assert str(refused.value) == (
        "The model must map [N, C, H, W] to [N, classes]; it returned (96,)."
    )


NAN = math.nan


def t(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def hand_made_report() -> TrustReport:
    """A report of two picks (4 and 1) whose every number is a binary fraction, built by hand."""
    options = CheckOptions(
        methods=("gradient",),
        settings=MethodSettings(samples=5, noise=0.25, steps=7, seed=1),
        layers=1,
        baselines=("black",),
        ig_steps=8,
        deletion_steps=2,
        top=2,
        road_shares=(0.0, 0.5),
        road_noise=0.125,
        seed=3,
    )
    blank = torch.zeros(2, 1, 2, 2)
    step = RandomisationStep("fc", ("fc",), t([0.5, NAN]), t([0.25, 0.75]), blank)
    rows = [
        Completeness(4, 3, "black", 8, False, 1.5, 2.0, 0.25),
        Completeness(1, 0, "black", 8, False, 0.5, 1.0, 1.0),
    ]
    fractions = t([0.0, 0.5, 1.0])
    faithful = {
        "gradient": Curves(fractions, t([[1.0, 0.5, 0.0], [0.5, 0.5, 0.5]]),
                           t([[0.0, 0.5, 1.0], [0.25, 0.25, 0.25]])),
        RANDOM: Curves(fractions, t([[1.0, 1.0, 1.0], [0.5, 0.5, 0.0]]),
                       t([[0.0, 0.0, 0.0], [0.0, 0.5, 0.5]])),
    }  # fmt: skip
    maps = ClassMaps(
        (4, 1), torch.tensor([[3, 1], [0, 2]]), t([[0.5, 0.25], [0.75, 0.125]]),
        torch.zeros(2, 2, 1, 2, 2), torch.tensor([[3, 1], [0, 2]]), t([1.5, -0.5]), blank,
    )  # fmt: skip
    sensitivity = [
        ClassSensitivity("gradient", "runner_up", (4, 1), torch.tensor([3, 0]),
                         torch.tensor([1, 2]), t([0.95, NAN]), t([0.5, 0.25]), blank),
        ClassSensitivity("gradient", "random", (4, 1), torch.tensor([3, 0]),
                         torch.tensor([7, 5]), t([0.25, 0.9]), t([0.125, 1.0]), blank),
    ]  # fmt: skip
    road = {"gradient": RoadCurves(t([0.0, 0.5]), t([[1.0, 0.5], [0.5, 0.25]]),
                                   t([[1.0, 1.0], [0.5, 0.5]]))}  # fmt: skip
    return TrustReport(
        indices=(4, 1),
        classes=torch.tensor([3, 0]),
        options=options,
        randomisation={"gradient": RandomisationCurve("gradient", "cascade", blank, (step,))},
        completeness=rows,
        faithfulness=faithful,
        class_maps=maps,
        class_sensitivity=sensitivity,
        road=road,
        noise_std=t([0.25, 0.125]),
        milliseconds={"randomisation": 2.0, "road": 1.5},
    )


def test_the_report_of_a_hand_made_result_field_by_field() -> None:
    spread = {"mean": 0.5, "std": 0.25}
    expected = {
        "indices": [4, 1],
        "classes": [3, 0],
        "settings": {
            "methods": ["gradient"],
            "smoothgrad": {"samples": 5, "noise_fraction_of_range": 0.25,
                           "noise_std_per_image": [0.25, 0.125], "seed": 1},
            "integrated_gradients_steps": 7,
            "randomisation": {"mode": "cascade", "layers": 1},
            "completeness": {"baselines": ["black"], "steps": 8, "tolerance": 0.05,
                             "max_steps": 512, "blur_sigma": 2.0},
            "top_classes": 2,
            "class_sensitivity": {"kinds": ["runner_up", "random"], "insensitive_spearman": 0.9},
            "road": {"shares": [0.0, 0.5], "noise_std": 0.125},
            "seed": 3,
        },
        "randomisation": {"gradient": {"mode": "cascade", "steps": [{
            "layer": "fc", "randomised_layers": 1,
            "spearman": {"mean": 0.5, "std": 0.0}, "ssim": spread,
            "spearman_per_image": [0.5, None], "ssim_per_image": [0.25, 0.75],
        }]}},
        "completeness": [
            {"index": 4, "class": 3, "baseline": "black", "steps": 8, "automatic": False,
             "attribution_sum": 1.5, "output": 2.0, "baseline_output": 0.25,
             "difference": 1.75, "delta": -0.25, "relative_error": 0.25 / 1.75,
             "tolerance": None, "reached": True, "verdict": "14.3% error with 8 fixed steps"},
            {"index": 1, "class": 0, "baseline": "black", "steps": 8, "automatic": False,
             "attribution_sum": 0.5, "output": 1.0, "baseline_output": 1.0,
             "difference": 0.0, "delta": 0.5, "relative_error": None,
             "tolerance": None, "reached": True,
             "verdict": "infinite error with 8 fixed steps"},
        ],
        "faithfulness": {
            "steps": 2,
            "fractions": [0.0, 0.5, 1.0],
            "removed_pixels": "black",
            "insertion_start": "blurred image (Gaussian, sigma 2 px)",
            "random_order": {"deletion_curve": [0.75, 0.75, 0.5],
                             "insertion_curve": [0.0, 0.25, 0.25]},
            "methods": {"gradient": {
                # Trapezoids over halves: (1 + 0.5) / 4 + (0.5 + 0) / 4 = 0.5, and so on.
                "deletion_auc": {"mean": 0.5, "std": 0.0},
                "insertion_auc": {"mean": 0.375, "std": 0.125},
                "random_deletion_auc": {"mean": 0.6875, "std": 0.3125},
                "random_insertion_auc": {"mean": 0.1875, "std": 0.1875},
                "deletion_auc_per_image": [0.5, 0.5],
                "insertion_auc_per_image": [0.5, 0.25],
                "deletion_curve": [0.75, 0.5, 0.25],
                "insertion_curve": [0.125, 0.375, 0.625],
            }},
        },
        "road": {
            "fractions": [0.0, 0.5],
            "imputation": "noisy linear: 8 neighbours, direct 0.1667, diagonal 0.08333, "
            "Gaussian noise std 0.125",
            "methods": {"gradient": {
                "morf_auc": {"mean": 0.28125, "std": 0.09375},
                "lerf_auc": {"mean": 0.375, "std": 0.125},
                "gap": {"mean": 0.09375, "std": 0.03125},
                "morf_auc_per_image": [0.375, 0.1875],
                "lerf_auc_per_image": [0.5, 0.25],
                "gap_per_image": [0.125, 0.0625],
                "morf_curve": [0.75, 0.375],
                "lerf_curve": [0.75, 0.75],
                "morf_curve_per_image": [[1.0, 0.5], [0.5, 0.25]],
                "lerf_curve_per_image": [[1.0, 1.0], [0.5, 0.5]],
            }},
        },
        "class_maps": {"top_classes": [[3, 1], [0, 2]],
                       "top_probabilities": [[0.5, 0.25], [0.75, 0.125]],
                       "contrast": [[3, 1], [0, 2]], "contrast_values": [1.5, -0.5]},
        "class_sensitivity": [
            {"index": 4, "method": "gradient", "kind": "runner_up", "class": 3,
             "other_class": 1, "spearman": 0.95, "ssim": 0.5, "insensitive": True},
            {"index": 1, "method": "gradient", "kind": "runner_up", "class": 0,
             "other_class": 2, "spearman": None, "ssim": 0.25, "insensitive": False},
            {"index": 4, "method": "gradient", "kind": "random", "class": 3,
             "other_class": 7, "spearman": 0.25, "ssim": 0.125, "insensitive": False},
            {"index": 1, "method": "gradient", "kind": "random", "class": 0,
             "other_class": 5, "spearman": 0.9, "ssim": 1.0, "insensitive": True},
        ],
        "milliseconds": {"randomisation": 2.0, "road": 1.5},
    }  # fmt: skip
    record = report_dict(hand_made_report())
    assert record.keys() == expected.keys()
    for key, value in expected.items():
        assert record[key] == value, key


def test_mean_and_std_leave_out_undefined_values() -> None:
    assert mean_and_std(t([NAN, math.inf, 0.5])) == (0.5, 0.0)
    assert mean_and_std(t([NAN])) == (None, None)
    assert mean_and_std(t([1.0, 2.0, 4.0, 5.0])) == (3.0, math.sqrt(2.5))  # population std


def test_options_are_kept_in_their_checked_form() -> None:
    options = CheckOptions(methods=("smoothgrad", "gradient", "smoothgrad"), road_shares=[0, 0.5],
                           road_noise=0)  # fmt: skip
    assert options.methods == ("smoothgrad", "gradient")
    assert options.road_shares == (0.0, 0.5) and isinstance(options.road_shares[0], float)
    assert options.road_noise == 0.0 and isinstance(options.road_noise, float)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"layers": 0}, "The number of layers to randomise must be a whole number of at least 1; "
                        "got 0."),
        ({"baselines": ()}, "Choose at least one baseline: black, uniform_noise, blurred."),
        ({"deletion_steps": 1025}, "Deletion and insertion steps must be a whole number from 1 "
                                   "to 1,024; got 1025."),
        ({"top": 0}, "The number of top classes must be a whole number of at least 1; got 0."),
    ],
)  # fmt: skip
def test_bad_options_are_refused_in_whole_sentences(options: dict, message: str) -> None:
    with pytest.raises(InputError) as refused:
        CheckOptions(**options)
    assert str(refused.value) == message


def _same(first: object, second: object) -> bool:
    """Equal field by field: tensors exactly (NaN where NaN), floats exactly (NaN as NaN)."""
    if isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor):
        return first.shape == second.shape and bool(
            ((first == second) | (first.isnan() & second.isnan())).all()
            if first.is_floating_point()
            else (first == second).all()
        )
    if dataclasses.is_dataclass(first) and dataclasses.is_dataclass(second):
        return type(first) is type(second) and all(
            _same(getattr(first, f.name), getattr(second, f.name))
            for f in dataclasses.fields(first)
        )
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(_same(first[k], second[k]) for k in first)
    if isinstance(first, list | tuple) and isinstance(second, list | tuple):
        return len(first) == len(second) and all(map(_same, first, second))
    if isinstance(first, float) and isinstance(second, float):
        return first == second or (math.isnan(first) and math.isnan(second))
    return first == second


def test_every_check_runs_with_the_options_and_classes_given(tiny_cnn: nn.Module) -> None:
    """Each section of the report is its check called directly with the same options: the
    settings, the seed, the classes held (not the predictions) and ROAD's noise reach each."""
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(11))
    picks = [1, 4]
    predicted = tiny_cnn(images[picks]).argmax(dim=1)
    held = (predicted + 1) % 10
    settings = MethodSettings(samples=3, noise=0.3, steps=4)
    options = CheckOptions(
        methods=("gradient", "smoothgrad", "integrated_gradients"),
        settings=settings,
        layers=1,
        baselines=("uniform_noise",),
        ig_steps=4,
        deletion_steps=4,
        top=2,
        road_shares=(0.0, 0.3),
        road_noise=0.2,
        seed=3,
    )
    report = run_checks(tiny_cnn, images, picks, held, options)
    assert set(report.milliseconds) == {
        "randomisation",
        "completeness",
        "faithfulness",
        "road",
        "class_maps",
        "class_sensitivity",
    }
    curves = randomisation_test(
        tiny_cnn, images, picks, options.methods, held, settings, "cascade", 1, 3
    )
    assert _same(report.randomisation, curves)
    assert _same(
        report.completeness,
        completeness(tiny_cnn, images, picks, held, "uniform_noise", 4, seed=3),
    )
    orders = {method: attribution_order(curve.original) for method, curve in curves.items()}
    assert _same(report.faithfulness, faithfulness(tiny_cnn, images, picks, orders, held, 4, 3))
    assert _same(report.road, road(tiny_cnn, images, picks, orders, held, (0.0, 0.3), 0.2, 3))
    assert _same(
        report.class_sensitivity,
        class_sensitivity(tiny_cnn, images, picks, options.methods, held, settings, 3),
    )


def test_classes_given_in_a_narrow_dtype_are_held_as_long_on_the_cpu(tiny_cnn: nn.Module) -> None:
    images = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    for given in (torch.tensor([4, 7], dtype=torch.int32), torch.tensor([4, 7], dtype=torch.uint8)):
        held = engine.held_classes(tiny_cnn, images, [0, 2], given)
        assert held.dtype == torch.long and held.device.type == "cpu"
        assert held.tolist() == [4, 7]
