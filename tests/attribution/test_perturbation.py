"""Occlusion and RISE: occlusion equals captum's ``Occlusion`` on the same window, stride and
fill; RISE equals its formula computed here from the same masks; batching changes nothing;
bad settings are refused with a message."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from captum.attr import Occlusion as CaptumOcclusion
from torch import nn

import tests.cli.test_cli as test_cli
from gradpick import attribution, data
from gradpick.attribution import Occlusion, Rise
from gradpick.attribution.perturbation import window_starts
from gradpick.cli import main
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.models import shipped as models
from gradpick.trust.baselines import blurred
from gradpick.trust.engine import METHODS
from gradpick.trust.road import impute

PICKED = [4, 1, 5]


def _captum(model, images, target, labels, window, stride, baselines):
    """captum's Occlusion of the picks for the held class: the logit, or the loss."""
    if target == "logit":
        forward, chosen = model, model(images).argmax(dim=1)
    else:

        def forward(x):
            return -F.cross_entropy(model(x), labels, reduction="none")  # captum: f(x) - f(x')

        chosen = None
    channels = images.shape[1]
    found = CaptumOcclusion(forward).attribute(
        images,
        sliding_window_shapes=(channels, window, window),
        strides=(channels, stride, stride),
        baselines=baselines,
        target=chosen,
    )
    # gradpick's loss map is the loss's drop: loss(x) - loss(x') = -(f(x) - f(x')) for f = -loss.
    return found if target == "logit" else -found


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("target", ["logit", "loss"])
@pytest.mark.parametrize(("window", "stride"), [(6, 2), (4, 4), (5, 3)])
def test_occlusion_equals_captum(tiny_bn_cnn, dtype, target, window, stride):
    model = tiny_bn_cnn.to(dtype)
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(2), dtype=dtype)
    labels = torch.tensor([3, 1, 4, 1, 5, 9])
    request = GradientRequest.build(model, images, PICKED, labels=labels, target=target)
    found = Occlusion(window=window, stride=stride, grey=0.5).attribute(request)
    expected = _captum(model, images[PICKED], target, labels[PICKED], window, stride, 0.5)
    assert found.maps.dtype == dtype
    assert found.maps.shape == (3, 3, 32, 32)
    # captum divides its sums by the window counts in float32 (``.float()``), so even float64
    # agrees to float32 rounding only.
    torch.testing.assert_close(found.maps, expected.to(dtype), rtol=1e-5, atol=1e-5)
    assert found.method == "occlusion" and found.settings["window"] == window


class _Viewing(nn.Module):
    """A convolution, then ``.view`` of its features: it cannot take channels-last pixels."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(7)
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.fc = nn.Linear(4 * 16 * 16, 10)
        self.eval()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = torch.relu(self.conv(images))
        return self.fc(features.view(features.shape[0], -1))


def test_a_model_that_views_its_features_gets_the_usual_layout_and_captums_maps():
    model = _Viewing()
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with pytest.raises(RuntimeError, match="view"):
        model(images.contiguous(memory_format=torch.channels_last))
    request = GradientRequest.build(model, images, PICKED, target="logit")
    maps = Occlusion(window=6, stride=3, batch_size=16).attribute(request).maps
    expected = _captum(model, images[PICKED], "logit", None, 6, 3, 0.5)
    torch.testing.assert_close(maps, expected, rtol=1e-5, atol=1e-5)


def test_occlusion_with_a_blurred_fill_equals_captum_with_that_baseline(float64_cnn):
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(5)).double()
    request = GradientRequest.build(float64_cnn, images, PICKED, target="logit")

    def fill(pixels: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        return torch.where(hidden.unsqueeze(1), blurred(pixels), pixels)

    found = Occlusion(fill, window=6, stride=2).attribute(request).maps
    picks = images[PICKED]
    expected = _captum(float64_cnn, picks, "logit", None, 6, 2, blurred(picks))
    torch.testing.assert_close(found, expected.double(), rtol=1e-5, atol=1e-5)


def test_occlusion_with_road_imputation_is_the_mean_drop_over_windows(float64_cnn):
    """The definition written out: every window imputed from its neighbours, one at a time."""
    images = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(6)).double()
    model = nn.Sequential(nn.Upsample(size=(32, 32)), float64_cnn).eval()
    request = GradientRequest.build(model, images, [2, 0], target="logit")
    found = Occlusion(impute, window=5, stride=3).attribute(request).maps[:, 0]
    for row, index in enumerate([2, 0]):
        image = images[index : index + 1]
        held = int(model(image).argmax())
        total = torch.zeros(16, 16, dtype=torch.float64)
        count = torch.zeros(16, 16, dtype=torch.float64)
        for y in window_starts(16, 5, 3):
            for x in window_starts(16, 5, 3):
                hidden = torch.zeros(1, 16, 16, dtype=torch.bool)
                hidden[:, y : y + 5, x : x + 5] = True
                drop = model(image)[0, held] - model(impute(image, hidden))[0, held]
                total[hidden[0]] += drop
                count[hidden[0]] += 1
        torch.testing.assert_close(found[row], total / count)


def test_window_starts_cover_the_side_like_captum():
    assert window_starts(32, 6, 2) == list(range(0, 27, 2))
    assert window_starts(10, 4, 4) == [0, 4, 8]  # the last window cut at the border
    assert window_starts(4, 4, 1) == [0]


def _rise_by_hand(model, images, method, height, width):
    """Σ_i y(x ⊙ M_i) M_i / (N p) for the predicted class's logit, one mask at a time."""
    masks = method.masks(height, width, dtype=images.dtype)
    maps = []
    for image in images:
        held = int(model(image[None]).argmax())
        total = torch.zeros(height, width, dtype=images.dtype)
        for mask in masks:
            total += model((image * mask)[None])[0, held] * mask
        maps.append(total / (len(masks) * method.settings["keep"]))
    return torch.stack(maps)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rise_equals_its_definition_with_the_same_masks(tiny_bn_cnn, dtype):
    model = tiny_bn_cnn.to(dtype)
    images = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(7), dtype=dtype)
    method = Rise(masks=40, cell=8, keep=0.4, seed=3, batch_size=16)
    request = GradientRequest.build(model, images, PICKED, target="logit")
    found = method.attribute(request).maps
    assert found.dtype == dtype and found.shape == (3, 3, 32, 32)
    with torch.no_grad():
        expected = _rise_by_hand(model, images[PICKED], method, 32, 32)
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(found[:, 1], expected, rtol=tolerance, atol=tolerance)


def test_rise_masks_follow_the_paper():
    """Grids of cells kept with probability p, upsampled bilinearly, cut at an offset."""
    method = Rise(masks=2000, cell=4, keep=0.3, seed=1)
    masks = method.masks(32, 32, dtype=torch.float64)
    assert masks.shape == (2000, 32, 32)
    assert float(masks.min()) >= 0 and float(masks.max()) <= 1
    assert abs(float(masks.mean()) - 0.3) < 0.01
    # The same seed gives the same masks; another seed others; a subset is those rows.
    torch.testing.assert_close(
        Rise(masks=2000, cell=4, keep=0.3, seed=1).masks(32, 32), masks.float()
    )
    assert not torch.equal(Rise(masks=2000, cell=4, keep=0.3, seed=2).masks(32, 32), masks.float())
    rows = torch.tensor([7, 3, 1999])
    torch.testing.assert_close(method.masks(32, 32, rows, torch.float64), masks[rows])
    # Cells of 4 px: a mask varies smoothly, within 1/4 of the range per pixel step.
    assert float((masks[:, :, 1:] - masks[:, :, :-1]).abs().max()) <= 0.25 + 1e-9


@pytest.mark.parametrize(
    "method",
    [
        lambda batch: Occlusion(window=6, stride=2, batch_size=batch),
        lambda batch: Rise(masks=50, cell=8, batch_size=batch),
    ],
)
def test_batching_and_other_picks_change_nothing(float64_cnn, float64_images, method):
    labels = torch.tensor([0, 1, 2, 3, 4, 5])
    request = GradientRequest.build(float64_cnn, float64_images, PICKED, labels=labels)
    whole = method(1000).attribute(request).maps
    for batch in (1, 7, 64):
        torch.testing.assert_close(method(batch).attribute(request).maps, whole)
    alone = GradientRequest.build(float64_cnn, float64_images, [PICKED[1]], labels=labels)
    torch.testing.assert_close(method(13).attribute(alone).maps, whole[1:2])


def test_the_cost_is_known_before_running(tiny_cnn, random_batch):
    request = GradientRequest.build(tiny_cnn, random_batch.images, [0, 1, 2, 3], target="logit")
    assert Occlusion(window=6, stride=2).forwards(request) == 4 * (14 * 14 + 1)
    assert Occlusion(window=4, stride=4).forwards(request) == 4 * (8 * 8 + 1)
    assert Rise(masks=300).forwards(request) == 4 * 300
    said = attribution.forward_cost(Occlusion(window=6, stride=2), request)
    assert said == "Occlusion runs 788 forwards (197 per pick × 4 picks)"
    one = GradientRequest.build(tiny_cnn, random_batch.images, [2], target="logit")
    assert (
        attribution.forward_cost(Rise(masks=300), one)
        == "RISE runs 300 forwards (300 per pick × 1 pick)"
    )
    score_cam = attribution.ScoreCAM().forwards(request)  # 1 + the layer's channels per pick
    assert attribution.forward_cost(attribution.ScoreCAM(), request) == (
        f"Score-CAM runs {score_cam:,} forwards ({score_cam // 4:,} per pick × 4 picks)"
    )
    # One forward (and backward) per pick is no cost to warn of.
    assert attribution.forward_cost(attribution.GradCAM(), request) is None
    assert attribution.forward_cost(attribution.SmoothGrad(), request) is None


def test_a_logit_difference_is_the_target_of_every_altered_image(float64_cnn, float64_images):
    request = GradientRequest.build(
        float64_cnn, float64_images, PICKED, target="logit", classes=[1, 2, 3], versus=[0, 0, 0]
    )
    found = Occlusion(window=8, stride=8).attribute(request).maps
    for row, (index, chosen) in enumerate(zip(PICKED, [1, 2, 3], strict=True)):
        image = float64_images[index : index + 1]

        def contrast(x, chosen=chosen):
            logits = float64_cnn(x)
            return logits[:, chosen] - logits[:, 0]

        expected = CaptumOcclusion(contrast).attribute(
            image, sliding_window_shapes=(3, 8, 8), strides=(3, 8, 8), baselines=0.5
        )
        torch.testing.assert_close(found[row : row + 1], expected.double(), rtol=1e-5, atol=1e-5)


def test_both_are_in_the_registry_and_build_from_settings():
    assert {"occlusion", "rise"} <= set(attribution.METHOD_NAMES)
    assert "occlusion" not in attribution.LAYER_METHODS
    built = attribution.build("occlusion", {"window": 4, "samples": 8})
    assert isinstance(built, Occlusion) and built.settings["window"] == 4
    with pytest.raises(InputError, match="not at a layer"):
        attribution.build("rise", {}, layer="layer3")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Occlusion(window=0), "window must be a whole number of at least 1"),
        (lambda: Occlusion(stride=1.5), "stride must be a whole number"),
        (lambda: Occlusion(grey=float("nan")), "grey must be a finite number"),
        (lambda: Occlusion(size=3), "takes no setting 'size'"),
        (lambda: Rise(masks=0), "masks must be a whole number of at least 1"),
        (lambda: Rise(keep=1.5), r"keep must be in \(0, 1\]"),
        (lambda: Rise(keep=0.0), r"keep must be in \(0, 1\]"),
        (lambda: Occlusion(bfloat16=2), r"bfloat16 is on \(1\) or off \(0\); got 2"),
        (lambda: Rise(bfloat16=0.5), r"bfloat16 is on \(1\) or off \(0\)"),
    ],
)
def test_bad_settings_are_refused(make, message):
    with pytest.raises(InputError, match=message):
        make()


def test_settings_that_do_not_fit_the_image_are_refused(tiny_cnn, random_batch):
    request = GradientRequest.build(tiny_cnn, random_batch.images, [0], target="logit")
    with pytest.raises(InputError, match="larger than the image"):
        Occlusion(window=40, stride=2).forwards(request)
    with pytest.raises(InputError, match="stride .* is larger than the window"):
        Occlusion(window=4, stride=6).attribute(request)
    with pytest.raises(InputError, match="RISE cell .* is larger than the image"):
        Rise(cell=64).attribute(request)


def test_bfloat16_forwards_keep_the_maps_in_float32_and_near_the_exact_ones(
    tiny_bn_cnn, random_batch
):
    """Each target from a bfloat16 forward is the float32 one up to bfloat16's rounding through
    the network (8 bits of mantissa), so a drop (two targets) is within a few percent of the
    largest target; the map stays float32, and the switch is off by default."""
    images = random_batch.images.float()
    request = GradientRequest.build(tiny_bn_cnn, images, PICKED, target="logit")
    assert Occlusion().settings["bfloat16"] == 0
    exact = Occlusion(window=4, stride=4).attribute(request).maps
    rounded = Occlusion(window=4, stride=4, bfloat16=1).attribute(request).maps
    assert rounded.dtype == torch.float32
    with torch.no_grad():
        largest = float(tiny_bn_cnn(images[PICKED]).abs().max())
    error = float((rounded - exact).abs().max())
    assert 0 < error <= 0.05 * largest, (error, largest)
    masks = Rise(masks=40, bfloat16=1).attribute(request).maps
    assert masks.dtype == torch.float32 and bool(torch.isfinite(masks).all())


def test_bfloat16_forwards_refuse_float64_images(float64_cnn, float64_images):
    request = GradientRequest.build(float64_cnn, float64_images, [0], target="logit")
    with pytest.raises(InputError, match="round float32 images; these are float64"):
        Occlusion(window=8, stride=8, bfloat16=1).attribute(request)


def test_the_served_model_is_not_changed(tiny_bn_cnn, random_batch):
    before = {name: value.clone() for name, value in tiny_bn_cnn.state_dict().items()}
    request = GradientRequest.build(tiny_bn_cnn, random_batch.images, [0, 3], target="logit")
    Occlusion(window=8, stride=4).attribute(request)
    Occlusion(window=8, stride=4, bfloat16=1).attribute(request)
    Rise(masks=20).attribute(request)
    assert not tiny_bn_cnn.training
    assert all(value.dtype == before[name].dtype for name, value in tiny_bn_cnn.named_parameters())
    for name, value in tiny_bn_cnn.state_dict().items():
        assert torch.equal(value, before[name]), name


# The front ends: the command line's grads (cost first, then the export) and check.

folder, fitting, weights = test_cli.folder, test_cli.fitting, test_cli.weights


def test_grads_says_the_cost_then_exports_the_occlusion_maps(capsys, fitting, weights, tmp_path):
    out = tmp_path / "occluded.npz"
    status, printed, err = test_cli.run(
        capsys, "grads", *test_cli.model_arguments(fitting, weights), "--indices", "2, 5",
        "--method", "occlusion", "--setting", "window=8", "--setting", "stride=4",
        "--target", "logit", "--out", str(out),
    )  # fmt: skip
    assert status == 0, err
    assert "cost: Occlusion runs 100 forwards (50 per pick × 2 picks)" in printed  # 7 x 7 + 1
    assert printed.index("cost:") < printed.index("wrote")
    saved = dict(np.load(out, allow_pickle=False))
    batch = data.load_batch(data.image_folder(fitting))
    model = models.load("tutorial", weights)
    picks = batch.float_images()[[2, 5]]
    expected = _captum(model, picks, "logit", None, 8, 4, 0.5)
    np.testing.assert_allclose(saved["channel_maps"], expected.numpy(), rtol=1e-4, atol=1e-6)
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert sidecar["method"]["name"] == "occlusion"
    assert sidecar["method"]["settings"]["window"] == 8


def test_grads_refuses_a_bad_rise_setting_in_one_line(capsys, fitting, weights):
    status, _, err = test_cli.run(
        capsys, "grads", *test_cli.model_arguments(fitting, weights), "--indices", "0",
        "--method", "rise", "--setting", "keep=2",
    )  # fmt: skip
    assert status == 2 and "keep must be in (0, 1]" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_check_runs_the_perturbation_methods_when_asked(capsys, folder, weights, tmp_path):
    out = tmp_path / "checks.json"
    arguments = ["--data", str(folder), "--model", "tutorial", "--weights", str(weights)]
    status = main(
        ["check", *arguments, "--indices", "1, 4", "--methods", "occlusion", "rise",
         "--layers", "1", "--json", str(out)]
    )  # fmt: skip
    printed = capsys.readouterr()
    assert status == 0, printed.err
    record = json.loads(out.read_text())
    assert set(record["randomisation"]) == {"occlusion", "rise"}
    assert set(record["road"]["methods"]) == {"occlusion", "rise"}
    assert "occlusion" not in METHODS and "gradient" in METHODS  # not run unless asked


def test_the_report_draws_occlusion_maps(capsys, fitting, weights, tmp_path):
    out = tmp_path / "picks.html"
    status, printed, err = test_cli.run(
        capsys, "report", *test_cli.model_arguments(fitting, weights), "--indices", "1, 4",
        "--method", "occlusion", "--setting", "window=8", "--setting", "stride=8",
        "--out", str(out),
    )  # fmt: skip
    assert status == 0, err
    page = out.read_text()
    assert "Occlusion (occlusion)" in page and "window = 8" in page
    assert "drop of the loss when hidden" in page


def test_progress_hears_every_batch_up_to_all_forwards(tiny_cnn, random_batch):
    request = GradientRequest.build(tiny_cnn, random_batch.images, [0, 1], target="logit")
    heard: list[tuple[int, int]] = []
    Occlusion(window=8, stride=8, batch_size=10, progress=lambda *a: heard.append(a)).attribute(
        request
    )
    assert heard == [(min(10 * i, 34), 34) for i in range(1, 5)]  # 2 x (16 + 1) forwards
    heard.clear()
    Rise(masks=5, batch_size=4, progress=lambda *a: heard.append(a)).attribute(request)
    assert heard == [(4, 10), (8, 10), (10, 10)]


# The explorer: the method box offers both, their sliders come from the registry, a pick maps.


@pytest.mark.parametrize("method", ["occlusion", "rise"])
def test_the_explorer_maps_picks_with_a_perturbation_method(generated, method):
    from gradpick.ui import keys
    from tests.app.test_app import TUTORIAL, captioned_indices, no_errors, open_app, select

    settings = {"window": 8, "stride": 4} if method == "occlusion" else {"masks": 200}
    app = select(open_app(**TUTORIAL, method=method, **settings), keys.SCATTER_CHART, [5, 3])
    no_errors(app)
    assert captioned_indices(app) == [5, 3]
    # The cost is said above the maps: 7 x 7 windows + the image, or one forward per mask.
    per_pick = 7 * 7 + 1 if method == "occlusion" else 200
    label = attribution.get(method).label
    said = f"{label} runs {2 * per_pick:,} forwards ({per_pick:,} per pick × 2 picks)"
    assert any(caption.value.startswith(said) for caption in app.caption)
    assert app.sidebar.selectbox(key=keys.METHOD).value == method
    sliders = {slider.key for slider in app.sidebar.slider}
    toggles = {toggle.key for toggle in app.sidebar.toggle}
    for parameter in attribution.get(method).parameters:
        drawn_as = toggles if parameter.switch else sliders
        assert (keys.setting_key(parameter.name) in drawn_as) == (parameter.shown is not None)
    # The bfloat16 switch: the same picks' maps from rounded forwards, said above them.
    app.sidebar.toggle(key=keys.setting_key("bfloat16")).set_value(True).run()
    no_errors(app)
    assert captioned_indices(app) == [5, 3]
    rounded = f"{label} runs {2 * per_pick:,} forwards in bfloat16 ({per_pick:,} per pick"
    assert any(caption.value.startswith(rounded) for caption in app.caption)
