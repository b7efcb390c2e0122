"""``gradpick check --json``'s ``badges``: one row per pick, method and check, from the explorer's
own badge code (``quick.quick_checks``), its verdicts those of the shipped thresholds."""

from __future__ import annotations

import json
import math

import torch

import tests.cli.test_cli as test_cli
from gradpick import data
from gradpick.cli import main
from gradpick.models import shipped as models
from gradpick.trust import quick
from gradpick.trust.engine import MethodSettings
from gradpick.trust.quick import verdict_of, verdict_rows

folder, weights = test_cli.folder, test_cli.weights
QUICK = ["--samples", "3", "--steps", "4", "--layers", "2", "--ig-steps", "6"]
FIELDS = ["index", "method", "check", "value", "verdict", "reason"]


def test_check_json_carries_one_badge_row_per_pick_method_and_check(
    capsys, folder, weights, tmp_path
):
    out = tmp_path / "checks.json"
    arguments = ["--data", str(folder), "--model", "tutorial", "--weights", str(weights)]
    methods = ["gradient", "integrated_gradients", "gradcam"]
    status = main(
        ["check", *arguments, "--indices", "4, 1", *QUICK, "--methods", *methods,
         "--json", str(out)]
    )  # fmt: skip
    printed = capsys.readouterr().out
    assert status == 0, printed
    rows = json.loads(out.read_text())["badges"]
    assert all(list(row) == FIELDS for row in rows)
    checks = {
        "gradient": ["class", "randomised", "road"],
        "integrated_gradients": ["class", "randomised", "completeness", "road"],
        "gradcam": ["class", "randomised", "road"],
    }
    expected_keys = [
        (index, method, check) for method in methods for index in (4, 1) for check in checks[method]
    ]
    assert [(r["index"], r["method"], r["check"]) for r in rows] == expected_keys
    # The same figures as the explorer's code gives, called directly on the same images.
    batch = data.load_batch(data.image_folder(folder))
    model = models.load("tutorial", weights)
    images = batch.float_images()
    with torch.no_grad():
        held = model(images[[4, 1]]).argmax(dim=1)
    settings = MethodSettings(samples=3, steps=4)
    direct = []
    for method in methods:
        found = quick.quick_checks(
            model, images, [4, 1], method, "logit", held, settings, budget_s=math.inf
        )
        direct += verdict_rows(found)
    assert json.loads(json.dumps(direct)) == rows
    for row in rows:
        assert row["verdict"] in ("pass", "weak", "fail")
        words = {quick.PASSES: "pass", quick.WEAK: "weak", quick.FAILS: "fail"}
        assert row["verdict"] == words[verdict_of(row["check"], row["value"], row["method"])]
        assert row["reason"]
    assert "trust badges (the explorer's verdicts" in printed


def test_checks_left_out_by_the_budget_are_not_run_rows(tiny_cnn, float64_images):
    images = float64_images.float()
    found = quick.quick_checks(
        tiny_cnn, images, [2, 0], "gradient", "logit", torch.tensor([1, 3]), budget_s=-1.0
    )
    rows = verdict_rows(found)
    assert [(r["index"], r["check"], r["verdict"], r["value"]) for r in rows] == [
        (2, "class", "not_run", None),
        (2, "randomised", "not_run", None),
        (2, "road", "not_run", None),
        (0, "class", "not_run", None),
        (0, "randomised", "not_run", None),
        (0, "road", "not_run", None),
    ]
    assert all("did not fit in this click's time budget" in r["reason"] for r in rows)


def test_a_constant_map_has_no_value_and_a_weak_verdict(tiny_cnn, float64_images):
    """A map with no order (all zero) gives a NaN Spearman: no number in the JSON, weak."""
    images = float64_images.float()

    def zero(_model: torch.nn.Module, classes: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(classes), 3, 32, 32)

    found = quick.quick_checks(
        tiny_cnn, images, [1], "gradient", "logit", torch.tensor([0]), budget_s=math.inf,
        map_of=zero, checks=("class",),
    )  # fmt: skip
    (row,) = verdict_rows(found)
    assert (row["check"], row["value"], row["verdict"]) == ("class", None, "weak")
