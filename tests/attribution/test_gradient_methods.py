"""Attribution views: each equals its definition, captum where captum has it, and the engine."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from captum.attr import InputXGradient, IntegratedGradients, NoiseTunnel, Saliency
from torch import nn

from gradpick import attribution
from gradpick.attribution import METHOD_NAMES, METHODS, AttributionMethod, attribute
from gradpick.errors import InputError, SelectionError
from gradpick.gradients.engine import input_gradients
from gradpick.gradients.request import GradientRequest
from gradpick.models.shipped import freeze

PICKED = [5, 2, 9]


def _as_double(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).double()


def _smooth_model() -> nn.Module:
    """Softplus everywhere: a smooth target, so path and noise integrals converge quickly."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        model = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1),
            nn.Softplus(),
            nn.Flatten(),
            nn.Linear(4 * 8 * 8, 5),
        )
    return freeze(model.double())


class _CubeSum(nn.Module):
    """Logit 0 is sum(x^3) / 3, so its gradient is x^2 and E[(x + e)^2] = x^2 + std^2."""

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        cube = (images**3).flatten(1).sum(dim=1, keepdim=True) / 3
        return torch.cat([cube, torch.zeros_like(cube)], dim=1)


@pytest.fixture
def small_images() -> torch.Tensor:
    """float64 [6, 3, 8, 8] in [0, 1], each image spanning exactly 0 to 1."""
    images = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    images[:, 0, 0, 0], images[:, 0, 0, 1] = 0.0, 1.0
    return images


def _per_sample_gradients(
    model: nn.Module, images: torch.Tensor, indices: list[int], classes: torch.Tensor
) -> torch.Tensor:
    """Plain autograd, one picked image at a time: the reference every view builds on."""
    rows = []
    for index, wanted in zip(indices, classes.tolist(), strict=True):
        image = images[index : index + 1].clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(model(image)[0, wanted], image)
        rows.append(gradient[0])
    return torch.stack(rows)


def test_gradient_is_the_engine_result_and_plain_autograd(tiny_cnn, random_batch):
    model, images = _as_double(tiny_cnn), random_batch.images.double()
    result = attribute(model, images, PICKED, target="logit", method="gradient")
    engine = input_gradients(model, images, PICKED, target="logit")
    assert torch.equal(result.maps, engine.gradients)
    expected = _per_sample_gradients(model, images, PICKED, engine.classes)
    torch.testing.assert_close(result.maps, expected, rtol=1e-12, atol=1e-15)
    assert result.gradients.indices == tuple(PICKED)
    assert result.stacked is None and result.settings == {}
    assert result.milliseconds >= result.gradients.timing > 0


@pytest.mark.parametrize("target", ["logit", "loss"])
def test_gradient_x_input_matches_captum(tiny_cnn, random_batch, target):
    model = _as_double(tiny_cnn)
    images, labels = random_batch.images.double(), random_batch.labels
    result = attribute(model, images, PICKED, labels, target=target, method="gradient_x_input")
    picked = images[PICKED].requires_grad_(True)
    if target == "logit":
        expected = InputXGradient(model).attribute(picked, target=result.gradients.classes)
    else:
        expected = InputXGradient(_loss_of(model)).attribute(
            picked, additional_forward_args=(labels[PICKED],)
        )
    torch.testing.assert_close(result.maps, expected, rtol=1e-12, atol=1e-15)


def _loss_of(model: nn.Module):
    def loss(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(images), labels, reduction="none")

    return loss


@pytest.mark.parametrize("target", ["logit", "loss"])
def test_integrated_gradients_matches_captum_midpoint(tiny_cnn, random_batch, target):
    model = _as_double(tiny_cnn)
    images, labels = random_batch.images.double(), random_batch.labels
    result = attribute(
        model,
        images,
        PICKED,
        labels,
        target=target,
        method="integrated_gradients",
        steps=20,
        baseline=0.25,
    )
    picked = images[PICKED]
    captum_ig = IntegratedGradients(model if target == "logit" else _loss_of(model))
    expected = captum_ig.attribute(
        picked,
        baselines=0.25,
        target=result.gradients.classes if target == "logit" else None,
        additional_forward_args=None if target == "logit" else (labels[PICKED],),
        n_steps=20,
        method="riemann_middle",
    )
    # captum rounds its alphas through float32, hence a tolerance above float64 rounding.
    torch.testing.assert_close(result.maps, expected, rtol=1e-5, atol=1e-9)
    assert result.settings == {"steps": 20, "baseline": 0.25}
    assert result.stacked is not None and len(result.stacked.indices) == 20 * len(PICKED)


@pytest.mark.parametrize("target", ["logit", "loss"])
def test_integrated_gradients_completeness(small_images, target):
    """Sum of maps = target(image) - target(baseline), for the class held at the image."""
    model, baseline = _smooth_model(), 0.5
    labels = torch.tensor([0, 1, 2, 3, 4, 0])
    result = attribute(
        model,
        small_images,
        [0, 3, 4],
        labels,
        target=target,
        method="integrated_gradients",
        steps=128,
        baseline=baseline,
    )
    picked = small_images[[0, 3, 4]]
    classes = result.gradients.classes
    with torch.no_grad():
        if target == "logit":
            at_image = model(picked).gather(1, classes[:, None])[:, 0]
            at_baseline = model(torch.full_like(picked, baseline)).gather(1, classes[:, None])[:, 0]
        else:
            at_image = F.cross_entropy(model(picked), classes, reduction="none")
            at_baseline = F.cross_entropy(
                model(torch.full_like(picked, baseline)), classes, reduction="none"
            )
    torch.testing.assert_close(result.gradients.target_values, at_image)
    difference = at_image - at_baseline
    assert difference.abs().min() > 1e-3  # the property is not trivially 0 = 0
    torch.testing.assert_close(result.maps.sum(dim=(1, 2, 3)), difference, rtol=1e-5, atol=1e-8)


def test_smoothgrad_without_noise_is_the_plain_gradient(tiny_cnn, random_batch):
    model, images = _as_double(tiny_cnn), random_batch.images.double()
    result = attribute(model, images, PICKED, target="logit", method="smoothgrad", noise=0.0)
    torch.testing.assert_close(result.maps, result.gradients.gradients, rtol=1e-12, atol=1e-15)
    assert result.settings == {"samples": 16, "noise": 0.0, "seed": 0}
    assert result.stacked is not None and len(result.stacked.indices) == 16 * len(PICKED)


def test_smoothgrad_noise_scale_follows_each_image_range(small_images):
    """For a gradient x^2, SmoothGrad - gradient averages to std^2 = (noise x range)^2."""
    images = small_images.clone()
    images[1] *= 0.5  # range 0.5 instead of 1
    noise, samples = 0.2, 64
    result = attribute(
        _CubeSum(),
        images,
        [0, 1],
        target="logit",
        classes=0,
        method="smoothgrad",
        samples=samples,
        noise=noise,
    )
    excess = (result.maps - result.gradients.gradients).flatten(1).mean(dim=1)
    expected = torch.tensor([noise**2, (noise * 0.5) ** 2], dtype=torch.float64)
    torch.testing.assert_close(excess, expected, rtol=0.05, atol=0.0)


def test_smoothgrad_agrees_with_captum_noise_tunnel_statistically(small_images):
    """Same noise convention as captum: on images spanning 0..1, captum's stdevs = our noise.

    The RNGs differ, so compare what both estimate: for a gradient x^2 the mean excess of
    SmoothGrad over the gradient is std^2; both land on it, and on each other, within 5%.
    """
    model, noise, samples, picked = _CubeSum(), 0.3, 64, [2, 5]
    result = attribute(
        model,
        small_images,
        picked,
        target="logit",
        classes=0,
        method="smoothgrad",
        samples=samples,
        noise=noise,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        expected = NoiseTunnel(Saliency(model)).attribute(
            small_images[picked],
            nt_type="smoothgrad",
            nt_samples=samples,
            stdevs=noise,
            target=0,
            abs=False,
        )
    plain = result.gradients.gradients
    ours = (result.maps - plain).flatten(1).mean(dim=1)
    theirs = (expected - plain).flatten(1).mean(dim=1)
    analytic = torch.full((2,), noise**2, dtype=torch.float64)
    torch.testing.assert_close(theirs, analytic, rtol=0.05, atol=0.0)
    torch.testing.assert_close(ours, theirs, rtol=0.05, atol=0.0)


def test_smoothgrad_holds_the_class_of_the_original_image(tiny_cnn, random_batch):
    model, images = tiny_cnn, random_batch.images
    result = attribute(model, images, PICKED, target="logit", method="smoothgrad", noise=3.0)
    assert result.stacked is not None
    held = result.gradients.classes.repeat_interleave(16)
    assert torch.equal(result.stacked.classes, held)
    noise = torch.randn((8, *images[PICKED].shape), generator=torch.Generator().manual_seed(0))
    noisy_predictions = model((images[PICKED] + 3.0 * noise).flatten(0, 1)).argmax(1)
    assert (
        noisy_predictions != result.gradients.classes.repeat(8)
    ).any()  # noise alone would switch


def test_smoothgrad_is_seeded(tiny_cnn, random_batch):
    def run(seed: int) -> torch.Tensor:
        return attribute(
            tiny_cnn,
            random_batch.images,
            PICKED,
            random_batch.labels,
            method="smoothgrad",
            samples=4,
            seed=seed,
        ).maps

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


@pytest.mark.parametrize("method", METHODS)
def test_maps_do_not_depend_on_the_other_picked_images(tiny_cnn, random_batch, method):
    model, images = _as_double(tiny_cnn), random_batch.images.double()
    options = {"samples": 4, "steps": 6}
    together = attribute(model, images, PICKED, random_batch.labels, method=method, **options)
    for row, index in enumerate(PICKED):
        alone = attribute(model, images, [index], random_batch.labels, method=method, **options)
        torch.testing.assert_close(together.maps[row], alone.maps[0], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", METHODS)
def test_maps_keep_dtype_shape_and_order(tiny_cnn, random_batch, method, dtype):
    model = tiny_cnn if dtype == torch.float32 else _as_double(tiny_cnn)
    images = random_batch.images.to(dtype)
    indices = [7, 1, 7]
    result = attribute(
        model, images, indices, random_batch.labels, method=method, samples=2, steps=3
    )
    assert result.maps.shape == (3, 3, 32, 32)
    assert result.maps.dtype == dtype and result.maps.device == images.device
    assert result.method == method and not result.maps.requires_grad
    # A repeated index gets the same map, up to rounding of its row in a batched kernel (a
    # perturbation map is a difference of two targets: the rounding of the targets themselves).
    perturbed = issubclass(METHODS[method], attribution.PerturbationMethod)
    atol = 1e-6 if perturbed and dtype == torch.float32 else 1e-9
    torch.testing.assert_close(result.maps[0], result.maps[2], rtol=1e-5, atol=atol)
    assert torch.isfinite(result.maps).all() and result.maps.abs().sum() > 0


@pytest.mark.parametrize("strategy", ["summed", "vmap"])
def test_other_strategies_give_the_same_maps(tiny_cnn, random_batch, strategy):
    model, images = _as_double(tiny_cnn), random_batch.images.double()
    options = {"method": "integrated_gradients", "steps": 4, "target": "logit"}
    reference = attribute(model, images, PICKED, **options)
    other = attribute(model, images, PICKED, strategy=strategy, **options)
    assert other.gradients.strategy == strategy and other.stacked is not None
    assert other.stacked.strategy == strategy
    torch.testing.assert_close(other.maps, reference.maps, rtol=1e-10, atol=1e-13)


def test_memory_is_measured_for_both_steps(tiny_cnn, random_batch):
    result = attribute(
        tiny_cnn,
        random_batch.images,
        [0, 1],
        random_batch.labels,
        method="smoothgrad",
        samples=4,
        measure_memory=True,
    )
    assert result.gradients.memory is not None and result.stacked is not None
    assert result.stacked.memory is not None
    plain_saved = result.gradients.memory.saved_for_backward.bytes
    stacked_saved = result.stacked.memory.saved_for_backward.bytes
    assert plain_saved and stacked_saved and stacked_saved > plain_saved


def test_model_is_left_untouched(tiny_cnn, random_batch):
    before = {name: value.clone() for name, value in tiny_cnn.state_dict().items()}
    attribute(tiny_cnn, random_batch.images, PICKED, random_batch.labels, method="smoothgrad")
    assert not tiny_cnn.training
    assert all(not parameter.requires_grad for parameter in tiny_cnn.parameters())
    assert all(parameter.grad is None for parameter in tiny_cnn.parameters())
    for name, value in tiny_cnn.state_dict().items():
        assert torch.equal(value, before[name])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "lime"}, "Unknown attribution method 'lime'"),
        ({"method": "smoothgrad", "samples": 0}, "samples must be a whole number of at least 1"),
        ({"method": "smoothgrad", "noise": -0.1}, "noise must be a finite number of at least 0"),
        ({"method": "smoothgrad", "noise": float("nan")}, "noise must be a finite number"),
        ({"method": "smoothgrad", "seed": -1}, "seed must be a whole number of at least 0"),
        ({"method": "integrated_gradients", "steps": 0}, "steps must be a whole number"),
        ({"method": "integrated_gradients", "baseline": "zero"}, "baseline must be a number"),
    ],
)
def test_bad_settings_are_clear_errors(tiny_cnn, random_batch, options, message):
    with pytest.raises(InputError, match=message):
        attribute(tiny_cnn, random_batch.images, [0], random_batch.labels, **options)


def test_bad_selection_and_missing_labels_come_from_the_engine(tiny_cnn, random_batch):
    with pytest.raises(SelectionError, match="out of range"):
        attribute(tiny_cnn, random_batch.images, [16], random_batch.labels)
    with pytest.raises(InputError, match="needs the true labels"):
        attribute(tiny_cnn, random_batch.images, [0], target="loss", method="integrated_gradients")


# ----------------------------------------------------------------------------- the registry


def test_the_registry_lists_every_method_class_by_name() -> None:
    assert tuple(METHODS) == METHOD_NAMES and METHOD_NAMES[0] == "gradient"
    assert set(attribution.__all__) >= {cls.__name__ for cls in METHODS.values()}
    for name, method in METHODS.items():
        assert method.name == name and attribution.get(name) is method
        assert issubclass(method, AttributionMethod) and method.label
        assert "{quantity}" in method.unit
        doc = method.__doc__ or ""
        assert "Example" in doc and any(
            year in doc for year in ("2014", "2016", "2017", "2018", "2020", "2021")
        )


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_each_parameter_default_is_valid_and_inside_its_range(name: str) -> None:
    method = METHODS[name]
    settings = method().settings
    assert list(settings) == [parameter.name for parameter in method.parameters]
    for parameter in method.parameters:
        assert parameter.check(parameter.default) == parameter.default == settings[parameter.name]
        assert parameter.label and parameter.help
        if parameter.shown is not None:
            low, high = parameter.shown
            assert low <= parameter.default <= high
            assert parameter.least is None or parameter.least <= low


@pytest.mark.parametrize("name", METHOD_NAMES)
def test_a_method_attributes_a_built_request_as_attribute_does(
    name: str, tiny_cnn, random_batch
) -> None:
    model, images = _as_double(tiny_cnn), random_batch.images.double()
    settings = {"samples": 3, "steps": 5, "noise": 0.2, "seed": 4, "baseline": 0.5}
    target = attribution.default_target(name)  # what attribute() explains when not told
    request = GradientRequest.build(model, images, PICKED, random_batch.labels, target)
    by_request = attribution.build(name, settings).attribute(request)
    by_arguments = attribute(model, images, PICKED, random_batch.labels, method=name, **settings)
    assert by_request.method == name and by_request.settings == by_arguments.settings
    torch.testing.assert_close(by_request.maps, by_arguments.maps, rtol=0, atol=0)


def test_a_setting_the_method_does_not_take_is_refused() -> None:
    with pytest.raises(InputError, match="Gradient takes no setting 'samples'"):
        attribution.Gradient(samples=4)
    with pytest.raises(InputError, match="Unknown attribution method 'lime'"):
        attribution.get("lime")


def test_smoothgrad_noise_depends_on_each_images_range_not_its_level_and_keeps_its_dtype():
    """The std is noise x (max - min): an image shifted by a constant gets the same noise."""
    from gradpick.attribution.gradient import _smoothgrad_noise

    image = torch.rand(1, 3, 4, 4, dtype=torch.float64)
    low = _smoothgrad_noise(image, [3], samples=5, noise=0.2, seed=0)
    high = _smoothgrad_noise(image + 0.4, [3], samples=5, noise=0.2, seed=0)
    assert low.dtype == torch.float64 and low.shape == (1, 5, 3, 4, 4)
    torch.testing.assert_close(low, high, rtol=1e-12, atol=0)


def test_a_settings_check_refuses_a_fraction_for_a_whole_number_and_names_no_bound_it_lacks():
    from gradpick.attribution.base import Parameter

    whole = Parameter("samples", "Samples", 16, "noisy copies", whole=True, least=1)
    with pytest.raises(InputError) as raised:
        whole.check(2.5)
    assert str(raised.value) == "samples must be a whole number of at least 1; got 2.5."
    unbounded = Parameter("scale", "Scale", 1.0, "a factor")
    with pytest.raises(InputError) as raised:
        unbounded.check(float("inf"))
    assert str(raised.value) == "scale must be a finite number; got inf."


def test_integration_midpoints_are_exact_in_the_images_dtype():
    from gradpick.attribution.gradient import _midpoints

    alphas = _midpoints(5, torch.zeros(1, dtype=torch.float64))
    assert torch.equal(alphas, torch.tensor([0.1, 0.3, 0.5, 0.7, 0.9], dtype=torch.float64))


def test_unknown_methods_settings_and_layers_are_named_with_the_known_ones() -> None:
    with pytest.raises(InputError) as refused:
        attribution.get("lime")
    assert str(refused.value) == (
        "Unknown attribution method 'lime'; use one of gradient, gradient_x_input, smoothgrad, "
        "integrated_gradients, gradcam, gradcam_plus_plus, hirescam, xgradcam, layercam, "
        "scorecam, occlusion, rise."
    )
    with pytest.raises(InputError) as refused:
        METHODS["smoothgrad"](steps=3)
    assert str(refused.value) == (
        "SmoothGrad takes no setting 'steps'; its settings: noise, samples, seed."
    )
    with pytest.raises(InputError) as refused:
        METHODS["gradient"](samples=3)
    assert str(refused.value).endswith("takes no setting 'samples'; its settings: none.")
    with pytest.raises(InputError) as refused:
        attribution.build("gradient", {}, layer="conv")
    assert str(refused.value).endswith(
        "works on the input pixels, not at a layer; the layer methods: gradcam, "
        "gradcam_plus_plus, hirescam, xgradcam, layercam, scorecam."
    )
    assert attribution.build("scorecam", {"batch_size": 3, "samples": 9}).settings == {
        "batch_size": 3
    }


def test_attributes_defaults_are_the_documented_ones(small_images: torch.Tensor) -> None:
    model = _smooth_model()
    picks, classes = [1, 4], [2, 0]

    def maps(**options: object) -> torch.Tensor:
        found = attribute(model, small_images, picks, target="logit", classes=classes, **options)
        assert found.gradients.memory is None  # not measured unless asked
        return found.maps

    assert torch.equal(
        maps(method="smoothgrad"), maps(method="smoothgrad", samples=16, noise=0.15, seed=0)
    )
    assert torch.equal(
        maps(method="integrated_gradients"),
        maps(method="integrated_gradients", steps=32, baseline=0.0),
    )
    assert not torch.equal(maps(method="smoothgrad"), maps(method="smoothgrad", noise=1.15))
    assert not torch.equal(
        maps(method="integrated_gradients"), maps(method="integrated_gradients", steps=33)
    )
    scored = attribute(model, small_images, picks, method="scorecam", target="logit", batch_size=3)
    assert scored.settings == {"batch_size": 3}


@pytest.mark.parametrize("method", ["smoothgrad", "integrated_gradients"])
def test_a_logit_difference_is_the_difference_of_the_two_logits_maps(
    small_images: torch.Tensor, method: str
) -> None:
    """Both methods are linear in the target: the maps of z[c] - z[v] are the maps of z[c]
    minus those of z[v], over the same noise or the same path."""
    model = _smooth_model()
    picks, ours, theirs = [1, 4], [2, 0], [3, 3]
    chosen = METHODS[method](**({"samples": 4} if method == "smoothgrad" else {"steps": 8}))

    def maps(classes: list[int], versus: list[int] | None = None) -> torch.Tensor:
        request = GradientRequest.build(
            model, small_images, picks, target="logit", classes=classes, versus=versus
        )
        return chosen.attribute(request).maps

    difference = maps(ours, theirs)
    assert torch.allclose(difference, maps(ours) - maps(theirs), rtol=0, atol=1e-12)
    assert not torch.allclose(difference, maps(ours), rtol=0, atol=1e-6)
