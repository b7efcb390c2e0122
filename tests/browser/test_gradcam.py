"""In the browser: scikit-image's photos through a torchvision ResNet-18 (random weights, nothing
downloaded) at 224 pixels, Grad-CAM chosen in the sidebar, its automatic layer marked in the
layer box, and the overlays drawn for every pick. The screenshot goes to ``artifacts/`` and,
with ``GRADPICK_UPDATE_SCREENSHOTS=1``, to ``assets/screenshots/gradcam.png``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gradpick.ui import heatmaps, keys
from tests.serving import (
    APP_IDLE,
    CHROMIUM_ARGS,
    VIEWPORT,
    chromium_executable,
    explorer_server,
    open_explorer,
    open_local_folder,
    page_errors,
    photo_folder,
    pick_by_text,
    save_screenshot,
    wait_for_heatmaps,
)

HEATMAPS = keys.selector(keys.HEATMAPS_CONTAINER)
STRIP_SIZES_JS = f"""
() => Array.from(document.querySelectorAll('{HEATMAPS} [data-testid="stImage"] img'),
  (img) => [img.naturalWidth, img.naturalHeight])
"""

BOX_TEXT_JS = """
(box) => box.innerText + ' ' + Array.from(box.querySelectorAll('input'), (i) => i.value).join(' ')
"""
"""A select box's text with its input's value (the chosen option may live in either)."""


def test_gradcam_overlays_of_photos_through_resnet18_at_224(
    tmp_path: Path, cifar_like_factory: Callable[[int], Path]
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    folder = photo_folder(tmp_path / "photos")
    served = explorer_server(
        cifar_like_factory(3),
        tmp_path / "cache",
        "e2e-gradcam-server",
        model="torchvision:resnet18",
    )
    with served as running, sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable(), args=CHROMIUM_ARGS
        )
        page = open_explorer(browser, running.url)
        open_local_folder(page, folder, 4)
        page.locator(keys.selector(keys.METHOD)).click()
        page.get_by_role("option", name="Grad-CAM", exact=True).click()
        page.locator(APP_IDLE).wait_for()
        pick_by_text(page, [0, 1, 2, 3])
        wait_for_heatmaps(page, [0, 1, 2, 3])
        page.get_by_text("Grad-CAM at layer layer4 (7 × 7 grid").wait_for()
        layer_box = page.locator('[data-testid="stSelectbox"]').filter(has_text="Layer")
        shown_layer = layer_box.first.evaluate(BOX_TEXT_JS)
        assert "layer4 · 512 × 7 × 7 (automatic)" in shown_layer, shown_layer
        panels = 3  # image, Grad-CAM, overlay: a layer map is the same in every channel
        strip = [panels * heatmaps.DISPLAY_SIDE + (panels - 1) * 6, heatmaps.DISPLAY_SIDE]
        assert page.evaluate(STRIP_SIZES_JS) == [strip] * 4
        assert page_errors(page).count() == 0

        page.set_viewport_size({"width": 1500, "height": 2400})
        page.wait_for_timeout(1500)  # let the enlarged page settle before the picture
        top = layer_box.first.bounding_box()["y"] - 12
        shown = page.locator(HEATMAPS).bounding_box()
        clip = {"x": 0, "y": top, "width": 1500, "height": shown["y"] + shown["height"] + 12 - top}
        save_screenshot(page, "gradcam", docs=True, clip=clip)
        page.set_viewport_size(VIEWPORT)
        browser.close()
