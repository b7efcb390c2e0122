"""What the browser tests share: a real ``streamlit run app.py`` server and ways to read its page.

Not a test module: the browser and load tests import it as ``tests.serving`` (the repository
root is on ``sys.path``, as the folder of the ``tests`` package). The server and page helpers
live in ``gradpick.bench.serving`` (the explorer benchmark drives the same page); this adds
what only tests need: skipping without chromium, the data to serve, the explorer's server on
it, opening a local folder in the page, and server logs under ``artifacts/``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from gradpick import data
from gradpick.bench.pages import (  # noqa: F401 (tab_button re-exported for the browser tests)
    QUIET_MS,
    SETTLED_JS,
    TAB_SELECTED_JS,
    WATCH_CHANGES_JS,
    tab_button,
)
from gradpick.bench.serving import (  # noqa: F401 (re-exported for the browser tests)
    APP_IDLE,
    CHROMIUM_ARGS,
    HEATMAP_INDICES_JS,
    HEATMAPS_SHOW_JS,
    HOVERED_JS,
    LOAD_TIMEOUT_MS,
    PAGE_ERRORS,
    SCATTER_POINTS_JS,
    TEXT_BOX_LABEL,
    VIEWPORT,
    Server,
    click_point,
    free_port,
    healthy,
    heatmap_indices,
    metric_value,
    open_explorer,
    page_errors,
    pick_by_text,
    text_box,
    wait_for_heatmaps,
    wait_healthy,
)
from gradpick.bench.serving import streamlit_server as _streamlit_server
from gradpick.ui import config, keys

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts"
SCREENSHOTS = REPO / "assets" / "screenshots"
UPDATE_SCREENSHOTS = os.environ.get("GRADPICK_UPDATE_SCREENSHOTS") == "1"
"""The docs' screenshots are rewritten only when asked: a test run leaves tracked files alone."""
TAKE_SCREENSHOTS = UPDATE_SCREENSHOTS or os.environ.get("GRADPICK_SCREENSHOTS") == "1"
"""Pictures are taken only when asked (``GRADPICK_SCREENSHOTS=1``, or updating the docs'): a
picture asserts nothing, and enlarging the page, waiting for plotly to redraw it and encoding it
took each run of the suite about 20 s of its two cores."""
GENERATED_IMAGES = 200
"""Images per split of the generated stand-in folder when no CIFAR-10 copy is present."""

Clip = Mapping[str, float]


def screenshot(
    page: Any,
    name: str,
    docs: bool = False,
    *,
    size: Mapping[str, int] | None = None,
    settle_ms: int = 800,
    clip: Clip | Callable[[Any], Clip] | None = None,
    **options: Any,
) -> None:
    """When ``TAKE_SCREENSHOTS``: the page at the viewport ``size`` (then back to ``VIEWPORT``),
    ``settle_ms`` after that for plotly to finish drawing, to ``artifacts/e2e-NAME.png``, and
    when updating the docs' pictures to ``assets/screenshots/NAME.png`` too where ``docs``.
    ``clip``: the region, or a function of the page that finds it once resized; ``options`` go
    to Playwright's ``page.screenshot`` (``full_page``)."""
    if not TAKE_SCREENSHOTS:
        return
    if size is not None:
        page.set_viewport_size(dict(size))
    page.wait_for_timeout(settle_ms)
    if clip is not None:
        options["clip"] = dict(clip(page) if callable(clip) else clip)
    ARTIFACTS.mkdir(exist_ok=True)
    taken = ARTIFACTS / f"e2e-{name}.png"
    page.screenshot(path=str(taken), **options)
    if docs and UPDATE_SCREENSHOTS:  # the same picture, not a second rendering of the page
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(taken, SCREENSHOTS / f"{name}.png")
    if size is not None:
        page.set_viewport_size(VIEWPORT)


def chromium_executable() -> str:
    """Debian's chromium, or skip: the browser tests drive it through Playwright."""
    path = shutil.which("chromium")
    if path is None:
        pytest.skip(
            "Debian's chromium is not installed (make browser, or apt-get install chromium)"
        )
    return path


def real_cifar10_dir() -> Path | None:
    """A CIFAR-10 copy with train/ and test/ ImageFolder trees: ``$GRADPICK_CIFAR10_DIR``, else
    the shared copy beside the checkout; None when neither is there."""
    configured = os.environ.get(data.CIFAR10_DIR_ENV)
    if configured and (Path(configured) / "test").is_dir():
        return Path(configured)
    shared = REPO.parent / "shared" / "data" / "cifar10-jpg"
    return shared if (shared / "test").is_dir() else None


def cifar10_images(make_generated: Callable[[int], Path]) -> Path:
    """The real CIFAR-10 copy, else a generated stand-in folder (``cifar_like_factory``)."""
    return real_cifar10_dir() or make_generated(GENERATED_IMAGES)


@contextmanager
def streamlit_server(
    env: Mapping[str, str | None],
    python: str = sys.executable,
    log_name: str = "e2e-server",
) -> Iterator[Server]:
    """``python -m gradpick.ui.launch app.py`` (``make run``'s server) on a free port with
    ``env`` over this process's environment (a None value removes the variable); its output goes
    to artifacts/<log_name>.log.

    One intra-op thread unless ``env`` says otherwise: on a machine whose cores are busy, two
    spin-waiting OpenMP threads make each small gradient step tens of times slower.
    """
    threads = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    log = ARTIFACTS / f"{log_name}.log"
    with _streamlit_server(REPO / "app.py", {**threads, **env}, log, python) as server:
        yield server


@contextmanager
def explorer_server(
    images: Path,
    cache: Path,
    log_name: str = "e2e-server",
    hosted: bool | None = None,
    model: str | None = None,
) -> Iterator[Server]:
    """The explorer on the CIFAR-10 folder ``images`` with its own cache folder; ``hosted`` and
    ``model`` set the hosted mode and the served model when given (else the defaults)."""
    env = {data.CIFAR10_DIR_ENV: str(images), "GRADPICK_CACHE_DIR": str(cache)}
    if hosted is not None:
        env[config.HOSTED_ENV] = "1" if hosted else "0"
    if model is not None:
        env[config.MODEL_ENV] = model
    with streamlit_server(env, log_name=log_name) as server:
        yield server


PHOTOS = {
    "scene": {"astronaut.png": "astronaut", "rocket.jpg": "rocket"},
    "still": {"chelsea.jpg": "chelsea", "coffee.png": "coffee"},
}
"""scikit-image's bundled photos at their own sizes (512x512, 427x640, 300x451, 400x600),
in a two-class ImageFolder tree."""


def photo_folder(root: Path) -> Path:
    """``PHOTOS`` written under ``root`` (skips without scikit-image)."""
    photos = pytest.importorskip("skimage.data")
    for label, files in PHOTOS.items():
        (root / label).mkdir(parents=True)
        for name, photo in files.items():
            Image.fromarray(getattr(photos, photo)()).save(root / label / name)
    return root


def open_local_folder(page: Any, folder: Path, images: int) -> None:
    """Choose "Local folder" in the sidebar, enter ``folder`` and wait until the page reads its
    ``images`` images and is idle again."""
    sync_api = pytest.importorskip("playwright.sync_api")
    page.get_by_text("Local folder", exact=True).click()
    folder_box = page.locator(f"{keys.selector(keys.FOLDER_PATH)} input")
    folder_box.fill(str(folder))
    folder_box.press("Enter")
    page.get_by_text(f"folder {folder}, {images} images").wait_for()
    sync_api.expect(metric_value(page, "Images N")).to_have_text(str(images))
    page.locator(APP_IDLE).wait_for()


URL_HAS = "(text) => decodeURIComponent(location.search).includes(text)"
"""Whether the page's query string, decoded, contains ``text``."""
BOX_TEXT_JS = """
(box) => box.innerText + ' ' + Array.from(box.querySelectorAll('input'), (i) => i.value).join(' ')
"""
"""A select box's text with its input's value (the chosen option may live in either)."""


def maps_of_the_first_four(page: Any, method: str) -> None:
    """Choose the attribution ``method`` (its label in the sidebar's box), pick images 0 to 3
    by text and wait until exactly their maps show."""
    page.locator(keys.selector(keys.METHOD)).click()
    page.get_by_role("option", name=method, exact=True).click()
    page.locator(APP_IDLE).wait_for()
    pick_by_text(page, [0, 1, 2, 3])
    wait_for_heatmaps(page, [0, 1, 2, 3])


CHART_SETTLED_JS = """
(selector) => {
  const chart = document.querySelector(selector + ' .js-plotly-plot');
  if (!chart || !chart._fullLayout || !chart._fullData || !chart._fullData.length) return false;
  const box = chart.getBoundingClientRect();
  if (!box.width || !box.height) return false;
  const now = [box.left, box.top, box.width, box.height, chart._fullLayout.width].join();
  window.__chartBoxes = window.__chartBoxes || {};
  const settled = window.__chartBoxes[selector] === now;
  window.__chartBoxes[selector] = now;
  return settled;
}
"""
"""True once the chart has its data and the same box on two polls in a row: drawn and no longer
moving (a column still laying out, a scroll, a redraw after a rerun)."""


def wait_for_chart(page: Any, selector: str, polling: int = 100) -> None:
    """Wait until the page settled (the browser may still be drawing what a finished run sent,
    and move the chart) and the chart under ``selector`` is drawn and still, so its points can
    be clicked where ``SCATTER_POINTS_JS`` says they are."""
    page.evaluate(WATCH_CHANGES_JS)
    page.evaluate(SETTLED_JS, [QUIET_MS, LOAD_TIMEOUT_MS])
    page.wait_for_function(CHART_SETTLED_JS, arg=selector, polling=polling)


def expander_summary(page: Any, key: str) -> Any:
    """The clickable header of the expander drawn with widget key ``key``."""
    return page.locator(f"{keys.selector(key)} summary").first


def open_expander(page: Any, key: str) -> None:
    """Open the expander drawn with ``key`` (the detailed view, the downloads) and wait for the
    run that draws its content: both are drawn only while open."""
    summary = expander_summary(page, key)
    summary.scroll_into_view_if_needed()
    if page.locator(f"{keys.selector(key)} details[open]").count() == 0:
        summary.click()
    page.locator(APP_IDLE).wait_for()
