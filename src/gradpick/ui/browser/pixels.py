"""Each pixel's value under the mouse in the detailed view, whose maps are one image.

Drawn as a plotly chart of four heatmaps, the detailed view cost the browser a full plotly
redraw on every click. It is one picture now (``heatmaps.map_strip``: saliency, then the signed
red, green and blue maps), and its numbers travel beside it as float32 bytes by URL
(``gradpick.ui.media``). A small script in a hidden ``st.iframe`` (same origin as the page)
fetches them and, as the mouse moves over the picture, shows the row, the column and the value
of the pixel under it, as plotly's hover did. It only listens: it changes nothing on the page but
its own label, and sends nothing to the server.
"""

from __future__ import annotations

import numpy as np

from gradpick.ui.browser.frame import page_script

__all__ = ["PANELS", "TIP_ID", "script", "values_bytes"]

PANELS = ("saliency", "red", "green", "blue")
"""The maps of the picture, left to right, each one plane of ``values_bytes``."""
TIP_ID = "gradpick-pixel-value"
"""The id of the value label's element in the page (what the browser tests look for)."""


def values_bytes(saliency: np.ndarray, channels: np.ndarray) -> bytes:
    """The maps' values as little-endian float32 [4, H, W]: ``saliency`` [H, W], then the
    signed ``channels`` [3, H, W], row by row, as the script reads them."""
    planes = np.concatenate([saliency[None], channels]).astype("<f4")
    return planes.tobytes()


_BODY = """
  let values = null;
  fetch(config.values).then((r) => r.arrayBuffer()).then((b) => { values = new Float32Array(b); });
  const show = (event) => {
    const img = event.currentTarget;
    const scale = img.clientWidth / img.naturalWidth;
    if (!values || !scale) return;
    const x = event.offsetX / scale, y = event.offsetY / scale;
    const count = config.panels.length;
    const side = (img.naturalWidth - config.gap * (count - 1)) / count;
    const panel = Math.floor(x / (side + config.gap));
    const within = x - panel * (side + config.gap);
    if (panel < 0 || panel >= count || within >= side) { hide(); return; }
    const column = Math.min(config.width - 1, Math.floor(within / side * config.width));
    const row = Math.min(config.height - 1, Math.floor(y / img.naturalHeight * config.height));
    const value = values[(panel * config.height + row) * config.width + column];
    const element = tip();
    element.style.display = 'block';
    element.textContent = config.panels[panel] + ', row ' + row + ', column ' + column + ': '
      + Number(value.toPrecision(3));
    element.dataset.row = String(row);
    element.dataset.column = String(column);
    element.dataset.panel = config.panels[panel];
    const width = element.offsetWidth;
    const wide = event.clientX + 14 + width > window.parent.innerWidth;
    element.style.left = (wide ? event.clientX - 14 - width : event.clientX + 14) + 'px';
    element.style.top = (event.clientY + 14) + 'px';
  };
  let attached = null;
  const attach = () => {
    const img = page.querySelector(config.image + ' img');
    if (!img || img === attached) return;
    img.addEventListener('mousemove', show);
    img.addEventListener('mouseleave', hide);
    attached = img;
  };
  attach();
  const timer = setInterval(attach, 500);
  window.addEventListener('pagehide', () => {
    clearInterval(timer);
    hide();
    if (attached) {
      attached.removeEventListener('mousemove', show);
      attached.removeEventListener('mouseleave', hide);
    }
  });"""
_TIP_STYLE = (
    "padding: 2px 6px; font: 12px sans-serif; color: white; "
    "background: rgba(0,0,0,.75); border-radius: 3px; white-space: nowrap;"
)


def script(image_selector: str, values_url: str, shape: tuple[int, int], gap: int) -> str:
    """The iframe's HTML: the value label for the picture under ``image_selector`` (the CSS
    selector of its container), whose panels of ``shape`` (H, W) pixels lie ``gap`` picture
    pixels apart, reading ``values_bytes`` from ``values_url``."""
    config = {
        "image": image_selector,
        "values": values_url,
        "height": shape[0],
        "width": shape[1],
        "gap": gap,
        "panels": list(PANELS),
        "tip": TIP_ID,
        "tipStyle": _TIP_STYLE,
    }
    return page_script(_BODY, config)
