"""``gradpick layers``: every spatial layer with its output shape, the automatic one marked."""

from __future__ import annotations

import pytest
import torch

from gradpick.cli import main
from gradpick.models import zoo


def _spatial_outputs_by_hooks(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """Every module's output for one zero image, kept when it is an [N, C, h, w] map with more
    than one position: the definition, by forward hooks of our own."""
    found: dict[str, tuple[int, ...]] = {}
    handles = []
    for name, child in module.named_modules():
        if not name:
            continue

        def keep(_m, _i, output, name: str = name) -> None:
            if isinstance(output, torch.Tensor) and output.dim() == 4 and output[0, 0].numel() > 1:
                found.setdefault(name, tuple(output.shape[1:]))

        handles.append(child.register_forward_hook(keep))
    try:
        with torch.no_grad():
            module(torch.zeros(1, 3, 32, 32))
    finally:
        for handle in handles:
            handle.remove()
    return found


def test_layers_lists_every_spatial_layer_of_resnet20_and_marks_the_automatic(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["layers", "--model", "resnet20"]) == 0
    printed = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in printed[3:-1]]
    listed = {row[0]: tuple(int(side) for side in row[1].split("x")) for row in rows}
    expected = _spatial_outputs_by_hooks(zoo.load_model("resnet20").module)
    assert listed == expected
    automatic = [row[0] for row in rows if row[-1] == "(automatic)"]
    assert automatic == ["layer3"]  # the last map before ResNet-20's global pooling
    assert printed[-1] == "--layer defaults to layer3"
    assert printed[1] == f"{len(expected)} spatial layers at 32x32:"
