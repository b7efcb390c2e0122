"""The explorer's occlusion check through AppTest: off by default with its cost said, and when
on, one note per pick that agrees with occlusion computed by captum and the rule written out."""

from __future__ import annotations

from pathlib import Path

import torch

from gradpick import attribution
from gradpick.gradients.request import GradientRequest
from gradpick.trust.agreement import TOLERANCE, TOP_SHARE
from gradpick.ui import keys, service
from tests.app.test_app import TUTORIAL, no_errors, open_app, select
from tests.attribution.test_perturbation import _captum
from tests.trust.test_agreement import _by_hand

PICKS = [2, 5]


def _notes(app) -> dict[int, str]:
    """The occlusion notes by pick: captions and warnings that name occlusion's agreement."""
    lines = [caption.value for caption in app.caption] + [w.value for w in app.warning]
    return {
        int(line.split()[0].lstrip("#")): line
        for line in lines
        if line.startswith("#") and "and occlusion " in line
    }


def test_the_occlusion_check_says_its_cost_and_agrees_with_captums_occlusion(
    generated: Path,
) -> None:
    app = select(open_app(**TUTORIAL, method="gradient"), keys.SCATTER_CHART, PICKS)
    no_errors(app)
    # Off by default: no forwards run, the cost of turning it on is said (6 x 6 at stride 2
    # on 32 px: 14 x 14 windows + the image per pick).
    said = "Occlusion runs 394 forwards (197 per pick × 2 picks)"
    assert any(c.value == f"Occlusion check off ({said} when on)." for c in app.caption)
    assert _notes(app) == {}
    app.toggle(key=keys.OCCLUSION_CHECK).set_value(True).run()
    no_errors(app)
    notes = _notes(app)
    assert sorted(notes) == PICKS

    base = service.DataChoice()
    source = service.open_source(base)
    batch = service.read_batch(source, service.default_batch(base, source))
    model = service.load_model(service.ModelOption("tutorial"), torch.device("cpu")).module
    assert batch.labels is not None
    images, labels = batch.images[PICKS].float() / 255, batch.labels[PICKS]
    # The gradient's default target is the loss on the label; occlusion explains the same.
    request = GradientRequest.build(model, images, [0, 1], labels=labels, target="loss")
    shown = attribution.Gradient().attribute(request).maps
    occluded = _captum(model, images, "loss", labels, 6, 2, 0.5)
    for pick, s, o in zip(PICKS, shown, occluded, strict=True):
        agree = _by_hand(s, o, TOP_SHARE, TOLERANCE)
        assert ("Gradient and occlusion agree" if agree else "disagree") in notes[pick], pick
    shown_as_warnings = {
        int(w.value.split()[0].lstrip("#")) for w in app.warning if "occlusion" in w.value
    }
    assert shown_as_warnings == {pick for pick in PICKS if "disagree" in notes[pick]}


def test_occlusion_itself_offers_no_check(generated: Path) -> None:
    app = select(open_app(**TUTORIAL, method="occlusion"), keys.SCATTER_CHART, [1])
    no_errors(app)
    assert not any(toggle.key == keys.OCCLUSION_CHECK for toggle in app.toggle)
