"""Maps as pictures: colour maps and overlays (numpy and PIL only), and results that draw
themselves in Jupyter.

``render`` turns attribution maps into images; ``notebook`` is what a result's
``_repr_html_`` calls. Below every result type, which it reads for typing only.
Names resolve on first use (``gradpick._lazy``), so importing the package runs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gradpick._lazy import lazy_exports

if TYPE_CHECKING:
    from gradpick.show.notebook import Html
    from gradpick.show.render import COLORMAPS, colorize, grid_png, overlay, saliency

__all__ = ["COLORMAPS", "Html", "colorize", "grid_png", "overlay", "saliency"]

__getattr__, __dir__ = lazy_exports(__name__)
