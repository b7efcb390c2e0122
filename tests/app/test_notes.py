"""The explorer says why a map shows nothing: a model whose outputs do not depend on the image
is said once above the outputs, and each empty map is captioned 'all zero' with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gradpick.ui import config, keys
from tests.app.test_app import heatmap_captions, no_errors, open_app, select
from tests.app.test_hardening import user_module

__all__ = ["user_module"]


def test_a_model_that_ignores_its_input_is_said_once_and_its_maps_say_why(
    generated: Path, user_module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    linear = torch.nn.Linear(3 * 32 * 32, 3)  # zero weights: the bias decides every image
    state = {"1.weight": torch.zeros_like(linear.weight), "1.bias": torch.tensor([0, 0, 5.0])}
    torch.save(state, tmp_path / "weights.pt")
    monkeypatch.setenv(config.MODEL_ENV, f"{user_module}:three_classes")
    monkeypatch.setenv(config.WEIGHTS_ENV, str(tmp_path / "weights.pt"))
    app = select(open_app(), keys.SCATTER_CHART, [2, 4])
    no_errors(app)
    said = [w.value for w in app.warning if "do not depend on the input" in w.value]
    assert len(said) == 1 and "outputs are the same for every image" in said[0]
    captions = heatmap_captions(app)
    assert len(captions) == 2 and all(c.endswith(" · all zero") for c in captions), captions
    assert not any("saliency 0 to" in c for c in captions)
    reasons = [i.value for i in app.info if "does not change with any pixel" in i.value]
    assert len(reasons) == 1 and reasons[0].startswith("images #2")
