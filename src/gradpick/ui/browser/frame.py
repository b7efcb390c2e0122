"""The frame shared by the scripts that act on the page from a hidden iframe.

The hover thumbnails (``gradpick.ui.browser.hover``), the pixel values
(``gradpick.ui.browser.pixels``) and the
picked outlines (``gradpick.ui.browser.outlines``) each run in a hidden ``st.iframe`` of the page's
own
origin and reach the page through ``window.parent``. They share this frame: their settings as
JSON, the page, and one floating label made on first use and hidden when the mouse leaves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

__all__ = ["page_script"]

_FRAME = """<script>
(() => {
  const config = __CONFIG__;
  const page = window.parent.document;
  const tip = () => {
    let element = page.getElementById(config.tip);
    if (!element) {
      element = page.createElement('div');
      element.id = config.tip;
      // The script's own style first: the label stays fixed, hidden, and out of the way of
      // the mouse whatever that style says.
      element.style.cssText = config.tipStyle
        + ' position: fixed; z-index: 1000; pointer-events: none; display: none;';
      page.body.appendChild(element);
    }
    return element;
  };
  const hide = () => { const element = page.getElementById(config.tip);
                       if (element) element.style.display = 'none'; };
__BODY__
})();
</script>"""


def page_script(body: str, config: Mapping[str, object]) -> str:
    """The iframe's HTML: ``body`` (JavaScript) run with ``config`` (as JSON), ``page`` (the
    parent document), ``tip()`` (the label ``config.tip``, styled by ``config.tipStyle``, made on
    first use) and ``hide()`` (which hides it) in scope."""
    return _FRAME.replace("__CONFIG__", json.dumps(config)).replace("__BODY__", body)
