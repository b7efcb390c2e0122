"""The badge calibration: its known-bad maps by their definitions (scipy's Sobel, a Gaussian
written out), the verdicts on known-good and known-bad synthetic cases through the badges' own
code, and the thresholds and rates from hand-made figures."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import ndimage
from torch import nn

from gradpick.bench import calibration
from gradpick.bench.calibration import Figure, blob_maps, choose_thresholds, edge_maps
from gradpick.models.shipped import freeze
from gradpick.trust import quick
from gradpick.trust.quick import FAILS, PASSES, quick_checks

IMAGES = torch.rand(3, 3, 20, 24, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


def test_edge_maps_are_the_sobel_magnitude_of_the_grey_level() -> None:
    maps = edge_maps(IMAGES)
    assert maps.shape == IMAGES.shape and maps.dtype == IMAGES.dtype
    for image, found in zip(IMAGES.numpy(), maps.numpy(), strict=True):
        grey = image.mean(axis=0)
        # scipy's sobel is the correlation with [1, 2, 1] x [-1, 0, 1]; the sign does not matter
        magnitude = np.hypot(ndimage.sobel(grey, axis=1), ndimage.sobel(grey, axis=0))
        for channel in found:
            np.testing.assert_allclose(channel, magnitude, rtol=1e-12, atol=1e-12)


def test_the_blob_is_a_centred_gaussian_of_a_quarter_side() -> None:
    maps = blob_maps(IMAGES.float())
    assert maps.dtype == torch.float32
    height, width, sigma = 20, 24, 5.0
    for row, column in [(0, 0), (9, 11), (10, 12), (19, 23), (3, 17)]:
        distance = (row - 9.5) ** 2 + (column - 11.5) ** 2
        expected = math.exp(-distance / (2 * sigma**2))
        assert float(maps[2, 1, row, column]) == pytest.approx(expected, rel=1e-6)
    assert torch.equal(maps[0], maps[2])  # the same for every image
    assert (height, width) == tuple(maps.shape[-2:])


class Linear(nn.Module):
    """Logits = W x: the gradient of class c is row c of W, so a gradient map is the model's
    own weights, which differ by class and vanish under randomisation."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(2)
        self.weight = nn.Parameter(torch.randn(4, 3 * 20 * 24, generator=generator).double())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return images.flatten(1) @ self.weight.T


@pytest.fixture
def linear() -> nn.Module:
    return freeze(Linear())


def verdicts(checks: quick.QuickChecks) -> list[dict[str, str]]:
    return [{b.check: b.verdict for b in pick.badges} for pick in checks.picks]


def test_a_known_good_map_passes_and_known_bad_maps_fail(linear: nn.Module) -> None:
    """Good: the gradient of a linear model (its weight rows: class-specific, learned). Bad: the
    image's edges, a centre blob and a re-initialised model's gradient, which the checks get back
    unchanged whatever model or class they ask about."""
    indices, classes = [0, 1, 2], torch.tensor([0, 1, 3])
    both = ("class", "randomised")
    good = quick_checks(
        linear, IMAGES, indices, "gradient", "logit", classes, budget_s=math.inf, checks=both
    )
    assert verdicts(good) == [{"class": PASSES, "randomised": PASSES}] * 3
    blank = calibration.reinitialised(linear)
    assert not torch.equal(blank.weight, linear.weight)
    bad_makers = {
        "edges": lambda _m, _c: edge_maps(IMAGES),
        "blob": lambda _m, _c: blob_maps(IMAGES),
        "re-initialised": lambda _m, c: torch.autograd.functional.jacobian(
            lambda x: blank(x).gather(1, c[:, None]).sum(), IMAGES
        ),
    }
    for kind, maker in bad_makers.items():
        bad = quick_checks(
            linear, IMAGES, indices, "gradient", "logit", classes, budget_s=math.inf,
            map_of=maker, checks=both,
        )  # fmt: skip
        assert [pick.verdict for pick in bad.picks] == [FAILS] * 3, kind
        assert all(v["randomised"] == FAILS for v in verdicts(bad)), kind


def test_the_reinitialised_model_redraws_every_layer_and_keeps_the_served_one(
    tiny_bn_cnn: nn.Module,
) -> None:
    before = {name: value.clone() for name, value in tiny_bn_cnn.state_dict().items()}
    blank = calibration.reinitialised(tiny_bn_cnn)
    for name, value in tiny_bn_cnn.state_dict().items():
        assert torch.equal(value, before[name])
        if "running" not in name and "num_batches" not in name:
            assert not torch.equal(blank.state_dict()[name], value), name
    assert not blank.training and not any(p.requires_grad for p in blank.parameters())


def figures(values: list[float], kind: str = "good", check: str = "class") -> list[Figure]:
    return [
        Figure("m", "gradient", kind, check, position, value)
        for position, value in enumerate(values)
    ]


def test_thresholds_are_the_calibration_halfs_percentiles_rounded_up() -> None:
    """Even positions calibrate: forty values 0.009 .. 0.399 there (odd ones, 0.99, ignored):
    weak from the 90th percentile (the 36th value, 0.359, rounded up), fails from above the
    largest (0.399 rounded up, and 0.01 more)."""
    values = []
    for step in range(1, 41):
        values += [step / 100 - 0.001, 0.99]
    chosen = choose_thresholds(figures(values, check="randomised"))
    assert chosen["input gradient"]["randomised"] == (0.36, 0.41)
    assert choose_thresholds(figures(values))["input gradient"]["class"] == (0.36, math.inf)
    # Good maps above 0.98 leave no room below a bad map's 1.0: the check is weak-only.
    assert choose_thresholds(figures([0.5, 0.0, 0.986], check="randomised"))["input gradient"][
        "randomised"
    ] == (
        0.99,
        math.inf,
    )
    assert choose_thresholds(figures([0.5, 0.0, 0.974], check="randomised"))["input gradient"][
        "randomised"
    ] == (0.98, 0.99)


def test_rates_count_a_weak_bad_map_as_missed_and_a_map_failing_any_check_as_failed() -> None:
    weak, fails = quick.THRESHOLDS["input gradient"]["randomised"]
    class_weak, _ = quick.THRESHOLDS["input gradient"]["class"]
    found = [
        # reported (odd) positions only: good 1 fails the randomised check, good 3 passes both
        Figure("m", "gradient", "good", "class", 1, 0.0),
        Figure("m", "gradient", "good", "randomised", 1, fails),
        Figure("m", "gradient", "good", "class", 3, 0.0),
        Figure("m", "gradient", "good", "randomised", 3, weak / 2),
        # bad 1 is only weak in the class check: missed there; its randomised check fails
        Figure("m", "gradient", "edges", "class", 1, class_weak),
        Figure("m", "gradient", "edges", "randomised", 1, 1.0),
        Figure("m", "gradient", "good", "randomised", 0, 1.0),  # calibration half: not counted
    ]
    assert calibration._rates(found, "class") == (2, 0.0, 1, 100.0)
    assert calibration._rates(found, "randomised") == (2, 50.0, 1, 0.0)
    assert calibration._rates(found, None) == (2, 50.0, 1, 0.0)


def test_the_command_makes_the_table_from_written_figures(capsys, tmp_path) -> None:
    from gradpick.cli import main

    weak, fails = quick.THRESHOLDS["input gradient"]["randomised"]
    found = [
        Figure("m", "gradient", "good", "randomised", 1, weak / 2),
        Figure("m", "gradient", "good", "randomised", 3, fails),
        Figure("m", "gradient", "good", "class", 1, math.nan),
        Figure("m", "gradient", "edges", "randomised", 1, 1.0),
    ]
    path = tmp_path / "figures.json"
    calibration.write_figures(path, found)
    assert '"value": null' in path.read_text()
    back = calibration.read_figures([path])
    assert [f.value for f in back[:2]] == [weak / 2, fails] and math.isnan(back[2].value)
    assert main(["bench-badges", "--read", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "| m | gradient | randomised | 2 | 50.0 | 1 | 0.0 |" in printed
    assert "| m | gradient | **badge** | 2 | 50.0 | 1 | 0.0 |" in printed


def test_the_command_refuses_options_that_do_not_match_the_models(capsys) -> None:
    from gradpick.cli import main

    status = main(["bench-badges", "--models", "resnet20", "tutorial", "--weights", "none"])
    assert status == 2
    assert "once per model" in capsys.readouterr().err
