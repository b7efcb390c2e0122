"""Maps that show nothing say why: in the export JSON, the report, the CLI and the explorer's
captions; a model whose outputs do not depend on its input is said once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from gradpick.attribution import attribute
from gradpick.attribution.notes import grouped_notes, map_notes, model_note
from gradpick.cli import main
from gradpick.models import shipped as models
from gradpick.share import export, report
from gradpick.ui import heatmaps
from gradpick.ui.panels import explore as gradients_panel
from tests.attribution.test_targets import _AgainstTheLoss, _positive_images

CLASSES = ("up", "down")


class _Flat(nn.Module):
    """A classifier whose head is zeroed, as torchvision's ViT built without weights: every
    logit is 0 whatever the image, and so is every gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 2)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(images)).mean(dim=(2, 3)))


def _export(result, images: torch.Tensor, quantity: str) -> export.Export:
    k = result.maps.shape[0]
    return export.Export(
        result,
        indices=list(range(k)),
        images=images[:k],
        positions=list(range(k)),
        names=[f"{i}.png" for i in range(k)],
        labels=[0] * k,
        class_names=CLASSES,
        quantity=quantity,
        model={"name": "net"},
        source=export.source_record("generated", len(images)),
    )


def test_a_grad_cam_of_the_loss_that_keeps_nothing_says_why_in_the_export() -> None:
    model, images = _AgainstTheLoss().eval(), _positive_images()
    labels = torch.zeros(3, dtype=torch.long)
    empty = attribute(model, images, [0, 1, 2], labels, "loss", method="gradcam")
    assert not bool(empty.maps.any())  # every map all zero, by construction
    notes = export.metadata(_export(empty, images, "loss"))["notes"]
    assert len(notes) == 3
    for note in notes:
        assert note.startswith("all zero: nothing at layer conv raises this image's loss")
        assert "target logit" in note
    shown = attribute(model, images, [0, 1, 2], labels, method="gradcam")
    assert bool((shown.maps.flatten(1).amax(dim=1) > 0).all())
    assert export.metadata(_export(shown, images, "logit[predicted]"))["notes"] == [None] * 3


def test_a_gradient_of_a_flat_model_and_a_constant_map_say_so() -> None:
    images = _positive_images()
    flat = attribute(_Flat().eval(), images, [0, 1], target="logit")
    (first, second) = map_notes(flat, "logit[predicted]")
    assert first is not None and first.short == "all zero"
    assert "logit[predicted] does not change with any pixel" in first.why
    assert first == second
    assert grouped_notes([first, None, second], ["#3", "#4", "#5"]) == [
        f"images #3, #5: {first.text}"
    ]

    class _Linear(nn.Module):  # z = sum of the pixels: its gradient is 1 everywhere
        def forward(self, images: torch.Tensor) -> torch.Tensor:
            total = images.flatten(1).sum(dim=1, keepdim=True)
            return torch.cat([total, -total], dim=1)

    constant = attribute(_Linear(), images, [0], target="logit", classes=0)
    (note,) = map_notes(constant, "logit[up]")
    assert note is not None and note.short == "constant 1"
    assert "singles out no place" in note.why


def test_a_model_whose_outputs_do_not_depend_on_the_input_is_named() -> None:
    images = _positive_images()
    with torch.no_grad():
        logits = _Flat()(images)
        varied = _AgainstTheLoss()(images)
    note = model_note(logits, "vit_b_16")
    assert note is not None and note.startswith("vit_b_16's outputs are all zero")
    assert "zeroed classification head" in note
    same = model_note(torch.ones(4, 3), "net")
    assert same is not None and "the same for every image" in same
    assert model_note(varied, "net") is None
    assert model_note(torch.ones(1, 3), "net") is None  # one image: nothing to compare


def test_the_report_says_why_a_map_is_empty_and_what_is_wrong_with_the_model() -> None:
    images = _positive_images()
    model = _Flat().eval()
    result = attribute(model, images, [0, 1], target="logit")
    content = _export(result, images, "logit[predicted]")
    probabilities = torch.full((2, 2), 0.5)
    warning = model_note(model(images).detach(), "flat-net")
    assert warning is not None
    document = report.build_report(content, probabilities, model_note=warning)
    assert document.count('<p class="note">all zero: logit[predicted] does not change') == 2
    assert ">all zero</figcaption>" in document and "saliency 0–" not in document
    assert "flat-net&#x27;s outputs are all zero" in document


def test_the_explorer_captions_an_empty_map_by_its_note_not_its_scale() -> None:
    images = _positive_images()
    result = attribute(_Flat().eval(), images, [0], target="logit")
    (note,) = map_notes(result, "logit[predicted]")
    pixels = (images[:1].clamp(0, 1) * 255).to(torch.uint8)
    tile = heatmaps.tiles(pixels, result.maps, False)[0]
    assert gradients_panel._caption("#0 · up", tile, note, False) == "#0 · up · all zero"
    varied = attribute(_AgainstTheLoss().eval(), images, [0], target="logit")
    shown = heatmaps.tiles(pixels, varied.maps, False)[0]
    caption = gradients_panel._caption("#0 · up", shown, None, False)
    assert caption == f"#0 · up · saliency 0 to {shown.limit:.3g}"


@pytest.fixture
def fitting(image_folder_factory) -> Path:
    return image_folder_factory(classes=10, per_class=2, name="fitting")


def test_gradpick_grads_prints_the_notes_of_empty_maps(
    fitting: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = models.build("tutorial")
    for parameter in net.modules():  # zero the last layer: a flat model
        if isinstance(parameter, nn.Linear):
            nn.init.zeros_(parameter.weight)
            nn.init.zeros_(parameter.bias)
    weights = tmp_path / "flat.pt"
    torch.save(net.state_dict(), weights)
    out = tmp_path / "maps.npz"
    status = main(
        ["grads", "--data", str(fitting), "--model", "tutorial", "--weights", str(weights)]
        + ["--method", "gradcam", "--indices", "0,3", "--out", str(out)]
    )
    printed = capsys.readouterr().out
    assert status == 0
    assert printed.count("outputs are all zero") == 1  # said once, up front
    assert printed.index("outputs are all zero") < printed.index("index")
    # The flat model's maps are empty because the target ignores the layer, not for a ReLU.
    assert "note: images 0, 3: all zero: logit[predicted] does not change with layer" in printed
    assert "(its gradient is zero)" in printed and "Try another layer" not in printed
    sidecar = json.loads(out.with_suffix(".json").read_text())
    assert [note.startswith("all zero") for note in sidecar["notes"]] == [True, True]
