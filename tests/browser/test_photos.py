"""In the browser: photos at their own sizes (scikit-image's, in a two-class folder) through a
torchvision ResNet-18 (random weights, nothing downloaded) read at 224 pixels, through the
local-folder and upload sources; then Grad-CAM chosen in the sidebar, its automatic layer marked
in the layer box, and the overlays drawn for every pick. One server and one browser for the
module, a session of its own for each test. Screenshots go to ``artifacts/`` and, with
``GRADPICK_UPDATE_SCREENSHOTS=1``, the Grad-CAM one to ``assets/screenshots/gradcam.png``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gradpick.ui import heatmaps, keys
from tests.serving import (
    APP_IDLE,
    BOX_TEXT_JS,
    explorer_server,
    maps_of_the_first_four,
    metric_value,
    open_explorer,
    open_local_folder,
    page_errors,
    photo_folder,
    pick_by_text,
    screenshot,
    wait_for_heatmaps,
)

HEATMAPS = keys.selector(keys.HEATMAPS_CONTAINER)
UPLOADER = f'{keys.selector(keys.UPLOADS)} [data-testid="stFileUploaderDropzoneInput"]'


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return photo_folder(tmp_path_factory.mktemp("photos") / "photos")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, cifar_like_factory: Callable[[int], Path]
) -> Iterator[str]:
    """The explorer serving ResNet-18; its first page a quick batch of 3 images per class."""
    served = explorer_server(
        cifar_like_factory(3),
        tmp_path_factory.mktemp("cache"),
        "e2e-photos-server",
        model="torchvision:resnet18",
    )
    with served as running:
        yield running.url


STRIP_SIZES_JS = f"""
() => Array.from(document.querySelectorAll('{HEATMAPS} [data-testid="stImage"] img'),
  (img) => [img.naturalWidth, img.naturalHeight])
"""


def _expect_photo_heatmaps(page: Any, index: int) -> None:
    """Pick ``index`` by text; its heatmaps show, named by their caption, at display size."""
    sync_api = pytest.importorskip("playwright.sync_api")
    pick_by_text(page, [index])
    wait_for_heatmaps(page, [index])
    sync_api.expect(page.get_by_text("Images read at 224x224 pixels")).to_be_visible()
    caption = page.locator(f'{HEATMAPS} [data-testid="stImageCaption"]')
    assert caption.inner_text().startswith(f"#{index} ")
    # Image, heatmap, overlay and three channel maps, each downsampled from 224 to the display side.
    panels = 6
    strip_width = panels * heatmaps.DISPLAY_SIDE + (panels - 1) * 6
    assert page.evaluate(STRIP_SIZES_JS) == [[strip_width, heatmaps.DISPLAY_SIDE]]
    assert page_errors(page).count() == 0


def test_real_photos_through_a_torchvision_model_at_224_pixels(
    browser: Any, server: str, photos: Path
) -> None:
    """Photos at their own sizes through the local-folder and upload sources, read at 224."""
    sync_api = pytest.importorskip("playwright.sync_api")
    page = open_explorer(browser, server)
    open_local_folder(page, photos, 4)
    _expect_photo_heatmaps(page, 2)
    screenshot(page, "photos")

    page.get_by_text("Uploaded images", exact=True).click()
    uploader = page.locator(UPLOADER)
    uploader.set_input_files(str(photos / "still" / "chelsea.jpg"))
    page.get_by_text("1 uploaded image(s), 1 images").wait_for()
    sync_api.expect(metric_value(page, "Images N")).to_have_text("1")
    page.locator(APP_IDLE).wait_for()
    _expect_photo_heatmaps(page, 0)
    assert page.get_by_text("their labels are ignored").count() == 0  # uploads have none
    screenshot(page, "photos-upload")
    page.context.close()


def test_gradcam_overlays_of_photos_through_resnet18_at_224(
    browser: Any, server: str, photos: Path
) -> None:
    page = open_explorer(browser, server)
    open_local_folder(page, photos, 4)
    maps_of_the_first_four(page, "Grad-CAM")
    page.get_by_text("Grad-CAM at layer layer4 (7 × 7 grid").wait_for()
    layer_box = page.locator('[data-testid="stSelectbox"]').filter(has_text="Layer")
    shown_layer = layer_box.first.evaluate(BOX_TEXT_JS)
    assert "layer4 · 512 × 7 × 7 (automatic)" in shown_layer, shown_layer
    panels = 3  # image, Grad-CAM, overlay: a layer map is the same in every channel
    strip = [panels * heatmaps.DISPLAY_SIDE + (panels - 1) * 6, heatmaps.DISPLAY_SIDE]
    assert page.evaluate(STRIP_SIZES_JS) == [strip] * 4
    assert page_errors(page).count() == 0

    def layer_box_to_maps(page: Any) -> dict[str, float]:
        top = layer_box.first.bounding_box()["y"] - 12
        shown = page.locator(HEATMAPS).bounding_box()
        return {"x": 0, "y": top, "width": 1500, "height": shown["y"] + shown["height"] + 12 - top}

    enlarged = {"width": 1500, "height": 2400}
    screenshot(page, "gradcam", docs=True, size=enlarged, settle_ms=1500, clip=layer_box_to_maps)
    page.context.close()
