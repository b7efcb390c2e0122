"""The strategy registry: each entry's claims (what it forwards, whether it chunks, what memory
it can count, what it costs) hold for the engine, and every caller offers exactly its names."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from gradpick import cli
from gradpick.errors import InputError
from gradpick.gradients import engine as gradients
from gradpick.gradients import strategies
from gradpick.gradients.request import GradientRequest
from gradpick.gradients.strategies import REGISTRY, CostModel


class RowCounter(nn.Module):
    """Wraps a model and records how many images each forward call gets."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.rows: list[int] = []
        self.eval()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        self.rows.append(int(images.shape[0]))
        output: torch.Tensor = self.model(images)
        return output


def test_names_follow_the_registry_with_the_default_first() -> None:
    assert strategies.NAMES == tuple(REGISTRY) == gradients.STRATEGIES
    assert strategies.NAMES[0] == "recompute"
    assert all(name == strategy.name for name, strategy in REGISTRY.items())


def test_unknown_strategy_names_the_known_ones() -> None:
    with pytest.raises(InputError, match="recompute, summed, retain_graph, vmap"):
        strategies.get("fastest")


@pytest.mark.parametrize("name", strategies.NAMES)
def test_each_strategy_forwards_what_it_declares(
    name: str, tiny_cnn: nn.Module, random_batch: Any
) -> None:
    images, labels = random_batch
    counter = RowCounter(tiny_cnn)
    gradients.input_gradients(counter, images, [3, 9], labels, strategy=name)
    whole = REGISTRY[name].whole_batch
    assert max(counter.rows) == (len(images) if whole else 2 if name == "recompute" else 1)
    assert (name in strategies.whole_batch()) == whole


@pytest.mark.parametrize("name", strategies.NAMES)
def test_each_strategy_chunks_as_it_declares(
    name: str, tiny_cnn: nn.Module, random_batch: Any
) -> None:
    images, labels = random_batch
    result = gradients.input_gradients(
        tiny_cnn, images, [3, 9, 1], labels, strategy=name, chunk_size=1
    )
    assert result.chunks == (3 if REGISTRY[name].chunks else 1)


@pytest.mark.parametrize("name", strategies.NAMES)
def test_saved_bytes_are_counted_where_the_registry_says_they_can_be(
    name: str, tiny_cnn: nn.Module, random_batch: Any
) -> None:
    images, labels = random_batch
    result = gradients.input_gradients(
        tiny_cnn, images, [3, 9], labels, strategy=name, measure_memory=True
    )
    assert result.memory is not None
    counted = result.memory.saved_for_backward.bytes
    assert (counted is not None and counted > 0) == REGISTRY[name].counts_saved


def test_budgeted_strategies_are_those_whose_cost_grows_with_n() -> None:
    assert strategies.budgeted() == strategies.whole_batch() == ("summed", "retain_graph")
    for name in strategies.budgeted():
        passes = REGISTRY[name].passes
        assert passes is not None and passes(2000, 4) > passes(1000, 4)


def test_the_cost_model_estimates_and_learns_from_measurements() -> None:
    costs = CostModel(forward_ms_per_image=0.5)
    summed = costs.estimate("summed", 1000, 4, runs=3)
    assert summed.seconds == pytest.approx(0.5 * 3 * 1000 / 1000)
    assert summed.total == pytest.approx(4.5)
    retained = costs.estimate("retain_graph", 1000, 4)
    assert retained.seconds == pytest.approx(0.5 * 1000 * 9 / 1000)
    costs.observe("summed", 1000, 4, milliseconds=300.0)  # 0.1 ms per pass, measured
    assert costs.estimate("summed", 2000, 4).seconds == pytest.approx(0.6)
    assert set(costs.over_budget(1000, 4, runs=3, budget_seconds=1.0)) == {"retain_graph"}
    assert costs.over_budget(10, 1, runs=1, budget_seconds=1.0) == {}


def test_an_estimate_describes_itself_in_one_sentence() -> None:
    estimate = CostModel(10.0).estimate("summed", 1000, 4, runs=3)
    assert estimate.describe() == "would take about 90 s (3 runs of ~30.0 s for k = 4, N = 1,000)"


def test_the_cli_offers_the_registry_with_its_help() -> None:
    parser = cli.build_parser()
    grads = parser._subparsers._group_actions[0].choices["grads"]  # type: ignore[union-attr]
    option = next(action for action in grads._actions if action.dest == "strategy")
    assert tuple(option.choices) == strategies.NAMES and option.default == "recompute"
    for strategy in REGISTRY.values():
        assert strategy.help in strategies.help_text() == option.help


def test_one_run_is_estimated_unless_told_otherwise() -> None:
    estimate = CostModel(forward_ms_per_image=10.0).estimate("summed", 100, 3)
    assert (estimate.runs, estimate.seconds, estimate.total) == (1, 3.0, 3.0)  # 300 passes


def test_a_measurement_of_the_naive_loop_is_shared_out_over_its_passes_for_k() -> None:
    costs = CostModel(forward_ms_per_image=1.0)
    costs.observe("retain_graph", 10, 2, milliseconds=1000.0)  # 10 * (1 + 2 * 2) = 50 passes
    later = costs.estimate("retain_graph", 20, 1, runs=2)  # 20 * 3 = 60 passes of 20 ms
    assert later.seconds == pytest.approx(1.2)
    assert later.total == pytest.approx(2.4)


def test_over_budget_counts_k_and_runs_and_keeps_an_estimate_at_the_budget() -> None:
    # 10 ms per pass at N = 100, k = 3, 2 runs: summed 300 passes -> 3 s a run, 6 s in all;
    # retain_graph 100 * 7 = 700 passes -> 7 s a run, 14 s in all.
    costs = CostModel(forward_ms_per_image=10.0)
    over = costs.over_budget(100, 3, runs=2, budget_seconds=6.0)
    assert set(over) == {"retain_graph"}
    assert (over["retain_graph"].k, over["retain_graph"].runs) == (3, 2)
    assert over["retain_graph"].total == pytest.approx(14.0)
    assert set(costs.over_budget(100, 3, runs=2, budget_seconds=5.9)) == {"summed", "retain_graph"}


def test_the_help_text_is_one_sentence_per_strategy() -> None:
    text = strategies.help_text()
    assert text.startswith("recompute: forward only the picked images again with gradients")
    assert ". summed: forward all N with gradients" in text
    assert ". retain_graph: " in text and ". vmap: " in text and text.endswith("per call.")
    assert "  " not in text


class DropsTheLastRow(nn.Module):
    """A broken model: one logit row fewer than the images it was given."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.eval()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        output: torch.Tensor = self.model(images)
        return output[:-1]


@pytest.mark.parametrize("name", strategies.whole_batch())
def test_whole_batch_strategies_refuse_logits_of_the_wrong_batch_size(
    name: str, tiny_cnn: nn.Module, random_batch: Any
) -> None:
    """Index 0's row exists either way: only the check of all N rows notices the lost one."""
    images, labels = random_batch
    with pytest.raises(InputError, match=r"to \[N, classes\]; it returned \(15, 10\)"):
        gradients.input_gradients(DropsTheLastRow(tiny_cnn), images, [0], labels, strategy=name)


def test_vmap_differentiates_class_zero_when_asked_for_it(
    tiny_cnn: nn.Module, random_batch: Any
) -> None:
    """Class 0 is a given class like any other, not "use the predicted one"."""
    images, _ = random_batch
    assert (tiny_cnn(images).argmax(dim=1) != 0).any()  # otherwise the two would agree
    result = gradients.input_gradients(
        tiny_cnn, images, range(len(images)), target="logit", classes=0, strategy="vmap"
    )
    expected = []
    for image in images:
        one = image.unsqueeze(0).clone().requires_grad_(True)
        (gradient,) = torch.autograd.grad(tiny_cnn(one)[0, 0], one)
        expected.append(gradient[0])
    torch.testing.assert_close(result.gradients, torch.stack(expected))


@pytest.mark.parametrize("name", strategies.NAMES)
def test_each_strategy_differentiates_a_logit_difference(
    name: str, tiny_cnn: nn.Module, random_batch: Any
) -> None:
    """versus makes each target z[class] - z[versus]: compared with autograd of the two
    logits of each picked image alone, class 0 in a pair included, and image 5 picked twice
    for class 3, against two other classes (two targets, not one reused)."""
    images, _ = random_batch
    picks, ours, theirs = [5, 0, 9, 5], [3, 0, 7, 3], [0, 4, 2, 1]
    request = GradientRequest.build(
        tiny_cnn, images, picks, target="logit", classes=ours, versus=theirs, strategy=name
    )
    result = gradients.compute(request)
    expected = []
    for index, mine, other in zip(picks, ours, theirs, strict=True):
        one = images[index].unsqueeze(0).clone().requires_grad_(True)
        logits = tiny_cnn(one)[0]
        (gradient,) = torch.autograd.grad(logits[mine] - logits[other], one)
        expected.append(gradient[0])
    torch.testing.assert_close(result.gradients, torch.stack(expected))


def test_a_model_vmap_cannot_run_is_named_with_its_error() -> None:
    class Itemised(nn.Module):
        def forward(self, images: torch.Tensor) -> torch.Tensor:
            scale = float(images.sum().item())  # .item() has no batching rule
            return images.flatten(1)[:, :3] * scale

    images = torch.rand(4, 3, 2, 2)
    with pytest.raises(InputError) as refused:
        gradients.input_gradients(
            Itemised().eval(), images, [1], target="logit", classes=0, strategy="vmap"
        )
    message = str(refused.value)
    assert message.startswith("vmap could not run this model (")
    assert message.endswith("); use strategy='recompute'.")
    error = message[len("vmap could not run this model (") : -len("); use strategy='recompute'.")]
    assert "item" in error and len(error) == 160  # the error's own words, cut at 160
