"""The explorer's default target through AppTest: Grad-CAM explains the predicted class's
logit and the plain gradient the loss, with the sidebar's target left as it opens."""

from __future__ import annotations

from pathlib import Path

from gradpick.ui import keys
from tests.app.test_app import TUTORIAL, no_errors, open_app, select


def _legend(app) -> str:
    return next(
        image.captions[0]
        for image in app.image
        if image.captions and image.captions[0].startswith("saliency |")
    )


def test_the_target_opens_at_the_methods_default(generated: Path) -> None:
    app = select(open_app(**TUTORIAL, method="gradcam"), keys.SCATTER_CHART, [2, 5])
    no_errors(app)
    assert app.sidebar.radio(key=keys.TARGET_MODE).value == "auto"
    assert "logit[predicted]" in _legend(app)
    app.sidebar.selectbox(key=keys.METHOD).set_value("gradient").run()
    no_errors(app)
    assert "loss" in _legend(app) and "logit" not in _legend(app)
    app.sidebar.radio(key=keys.TARGET_MODE).set_value("loss").run()
    app.sidebar.selectbox(key=keys.METHOD).set_value("gradcam").run()
    no_errors(app)
    assert "loss" in _legend(app)  # asked for: the loss stays available
