"""The trust checks on layer methods: Grad-CAM through randomisation, deletion and insertion,
the report and ``gradpick check --layer``; an all-zero map gives NaN (null), never a crash."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import tests.cli.test_cli as test_cli
from gradpick import attribution
from gradpick.cli import main
from gradpick.errors import InputError
from gradpick.models.shipped import freeze
from gradpick.trust.engine import MethodSettings, check_methods
from gradpick.trust.faithfulness import attribution_order, faithfulness
from gradpick.trust.randomisation import randomisation_test
from gradpick.trust.report import CheckOptions, report_dict, run_checks

folder, weights = test_cli.folder, test_cli.weights
PICKS = [1, 4]


@pytest.fixture
def images() -> torch.Tensor:
    return torch.rand(5, 3, 32, 32, generator=torch.Generator().manual_seed(7))


def test_every_registered_method_can_be_checked_and_a_typo_cannot() -> None:
    assert check_methods(["gradcam", "gradient"]) == ("gradcam", "gradient")
    with pytest.raises(InputError, match="Unknown attribution method 'gradcan'"):
        check_methods(["gradcan"])


def test_randomisation_recomputes_gradcam_at_the_chosen_layer_over_every_layer(
    tiny_bn_cnn: nn.Module, images: torch.Tensor
) -> None:
    settings = MethodSettings(layer="3")
    curves = randomisation_test(tiny_bn_cnn, images, PICKS, ("gradcam", "gradient"), None, settings)
    gradcam, gradient = curves["gradcam"], curves["gradient"]
    assert (
        [s.layer for s in gradcam.steps]
        == [s.layer for s in gradient.steps]
        == ["6", "3", "1", "0"]
    )
    with torch.no_grad():
        held = tiny_bn_cnn(images[PICKS]).argmax(dim=1)
    expected = attribution.attribute(
        tiny_bn_cnn, images, PICKS, target="logit", classes=held, method="gradcam", layer="3"
    )
    torch.testing.assert_close(gradcam.original, expected.maps)
    # Randomising the head changes d logit / d activation, so the map moves.
    assert not torch.equal(gradcam.steps[0].maps, gradcam.original)
    for step in gradcam.steps:
        finite = step.spearman[torch.isfinite(step.spearman)]
        assert bool(((finite >= -1 - 1e-9) & (finite <= 1 + 1e-9)).all())


def _no_positive_evidence() -> nn.Module:
    """A net whose class 0 falls with every ReLU'd activation: its Grad-CAM is all zero."""
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(4, 2),
    )  # fmt: skip
    with torch.no_grad():
        model[0].weight.abs_()
        model[0].bias.fill_(0.1)
        model[4].weight.copy_(torch.tensor([[-1.0, -1, -1, -1], [1.0, 1, 1, 1]]))
    return freeze(model.eval())


def test_an_all_zero_map_reports_a_nan_spearman_and_null_in_the_json(
    images: torch.Tensor,
) -> None:
    model = _no_positive_evidence()
    options = CheckOptions(
        methods=("gradcam",), settings=MethodSettings(layer="1"), ig_steps=4, top=2
    )
    report = run_checks(model, images, PICKS, 0, options)
    assert not bool(report.randomisation["gradcam"].original.any())
    assert all(math.isnan(value) for step in report.randomisation["gradcam"].steps
               for value in step.spearman.tolist())  # fmt: skip
    record = json.loads(json.dumps(report_dict(report), allow_nan=False))
    assert record["randomisation"]["gradcam"]["steps"][0]["spearman"]["mean"] is None
    assert set(record["faithfulness"]["methods"]) == {"gradcam"}


def test_deletion_follows_the_upsampled_map(tiny_bn_cnn: nn.Module, images: torch.Tensor) -> None:
    cam = attribution.attribute(
        tiny_bn_cnn, images, PICKS, target="logit", classes=[2, 5], method="gradcam", layer="3"
    )
    order = attribution_order(cam.maps)
    upsampled = cam.maps[:, 0].flatten(1)
    first = upsampled.gather(1, order[:, :1])
    torch.testing.assert_close(first[:, 0], upsampled.amax(dim=1))
    curves = faithfulness(tiny_bn_cnn, images, PICKS, {"gradcam": order}, [2, 5], steps=4)
    assert curves["gradcam"].deletion.shape == (2, 5)


def test_check_runs_gradcam_at_a_named_layer_and_records_it(capsys, folder, weights, tmp_path):
    out = tmp_path / "checks.json"
    quick = ["--layers", "2", "--ig-steps", "4", "--deletion-steps", "4"]
    arguments = ["--data", str(folder), "--model", "tutorial", "--weights", str(weights)]
    status = main(
        ["check", *arguments, "--indices", "1", "--methods", "gradcam", "--layer", "conv2",
         *quick, "--json", str(out)]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert status == 0, captured.err
    record = json.loads(out.read_text())
    assert record["layer"] == "conv2" and list(record["randomisation"]) == ["gradcam"]
    status = main(
        ["check", *arguments, "--indices", "1", "--methods", "gradcam", "--layer", "conv9",
         *quick, "--json", str(out)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and "no layer 'conv9'; close matches: conv" in err
