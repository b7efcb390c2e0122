"""The picked thumbnails' orange outlines, drawn over a grid chart that a click leaves unchanged.

Drawn as a trace of the grid's figure, the outlines made every click a new figure: Streamlit
sent it again and plotly redrew the whole chart (its hundred markers, the outlines of every
thumbnail, the sheet). The figure now holds only what a click does not change, and a small
script in a hidden ``st.iframe`` (same origin as the page, as ``gradpick.ui.browser.hover``'s) draws
the picked cells' outlines as boxes over the chart, placed by the chart's own axes, and again
whenever plotly redraws it (a resize, a new page). The boxes take no pointer events, so picking
works as before.

The script's own HTML never changes, so the browser keeps its iframe across clicks rather than
loading it again (a reload and a first draw were the last ~60 ms of a click's page changes).
The picked cells travel beside it as ``cells_html``, a hidden element whose change the script
observes and answers at once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gradpick.ui.browser.frame import page_script

__all__ = ["INSET", "LAYER_ID", "RING", "WIDTH", "cells_html", "picked_cells", "script"]

LAYER_ID = "gradpick-picked-outlines"
"""The id of the element holding the boxes (what the browser tests look for)."""
INSET = 0.05
"""Each box's gap to its cell's edge, in cells: inside the right/wrong outline (0.03)."""
WIDTH = 4
"""The boxes' line width in CSS pixels."""
RING = 15
"""A picked point's circle, across, in CSS pixels: around a scatter's 6-7 pixel markers."""


def picked_cells(picked: Sequence[int], first: int, last: int) -> list[int]:
    """The grid positions (0 is the page's first thumbnail) of the picked batch indices shown
    on the page of thumbnails ``first`` to ``last - 1``, in position order."""
    return sorted({index - first for index in picked if first <= index < last})


_BODY = """
  let chart = null, holder = null, cells = [];
  const read = () => {
    const element = holder && holder.querySelector('[data-cells]');
    cells = element ? JSON.parse(element.dataset.cells) : [];
  };
  const rings = (xaxis, yaxis) => {  // a circle around each picked batch index's point
    const where = new Map();
    for (const trace of chart._fullData) {
      if (!trace.customdata || !trace.x) continue;
      for (let i = 0; i < trace.customdata.length; i++) {
        const index = Number(trace.customdata[i]);
        if (!where.has(index)) where.set(index, [trace.x[i], trace.y[i]]);
      }
    }
    const half = config.ring / 2;
    return cells.filter((index) => where.has(index)).map((index) => {
      const [x, y] = where.get(index);
      return [index, xaxis._offset + xaxis.c2p(x) - half, yaxis._offset + yaxis.c2p(y) - half,
              config.ring, config.ring].map((value) => Math.round(value * 10) / 10);
    }).filter(([, left, top]) => left + half >= xaxis._offset
      && left + half <= xaxis._offset + xaxis._length && top + half >= yaxis._offset
      && top + half <= yaxis._offset + yaxis._length);  // zoomed out of the plot: not drawn
  };
  const draw = () => {
    if (!chart || !chart._fullLayout || !chart.isConnected) return;
    const container = chart.querySelector('.svg-container');
    const plot = container && container.querySelector('.main-svg');
    if (!plot) return;
    let layer = container.querySelector('#' + config.layer);
    if (!layer) {
      layer = page.createElement('div');
      layer.id = config.layer;
      layer.style.cssText = 'position: absolute; inset: 0; pointer-events: none;';
      plot.after(layer);  // above the sheet and the markers, below plotly's hover labels
    }
    const xaxis = chart._fullLayout.xaxis, yaxis = chart._fullLayout.yaxis;
    const boxes = config.columns ? cells.map((cell) => {
      const column = cell % config.columns, row = Math.floor(cell / config.columns);
      const left = xaxis._offset + xaxis.l2p(column + config.inset);
      const right = xaxis._offset + xaxis.l2p(column + 1 - config.inset);
      const top = yaxis._offset + yaxis.l2p(row + config.inset);
      const bottom = yaxis._offset + yaxis.l2p(row + 1 - config.inset);
      return [cell, left, Math.min(top, bottom), right - left, Math.abs(bottom - top)]
        .map((value) => Math.round(value * 10) / 10);
    }) : rings(xaxis, yaxis);
    const drawn = JSON.stringify(boxes);
    if (layer.dataset.drawn === drawn) return;  // unchanged: touch nothing
    layer.replaceChildren(...boxes.map(([cell, left, top, width, height]) => {
      const box = page.createElement('div');
      box.dataset.cell = String(cell);
      box.style.cssText = 'position: absolute; box-sizing: border-box; border: '
        + config.width + 'px solid ' + config.colour + '; left: ' + left + 'px; top: '
        + top + 'px; width: ' + width + 'px; height: ' + height + 'px;'
        + (config.columns ? '' : ' border-radius: 50%;');
      return box;
    }));
    layer.dataset.drawn = drawn;
  };
  const changed = new MutationObserver(() => { read(); draw(); });
  const attach = () => {
    const found = page.querySelector(config.chart + ' .js-plotly-plot');
    const present = page.querySelector(config.cells);
    if ((!found || found === chart || !found.on) && present === holder) return;  // nothing new
    if (found && found !== chart && found.on) {
      if (chart) chart.removeListener('plotly_afterplot', draw);
      chart = found;
      chart.on('plotly_afterplot', draw);
    }
    if (present !== holder) {
      changed.disconnect();
      holder = present;
      if (holder) changed.observe(holder, {childList: true, subtree: true, attributes: true,
                                           characterData: true});
    }
    read();
    draw();
  };
  // A chart or cells element drawn later, or anew, is taken up the moment it is added to the
  // page (a timer left the new chart's marks up to a period late, the page still changing).
  const added = new MutationObserver(attach);
  added.observe(page.body, {childList: true, subtree: true});
  attach();
  window.addEventListener('pagehide', () => {
    added.disconnect();
    changed.disconnect();
    if (chart) chart.removeListener('plotly_afterplot', draw);
  });"""


def script(
    chart_selector: str, cells_selector: str, columns: int | None, colour: str, ring: int = RING
) -> str:
    """The iframe's HTML: marks of ``colour`` around what the element at ``cells_selector``
    holds (``cells_html``), over the chart at ``chart_selector`` (the CSS selector of its
    container). With ``columns``, a grid's cells (positions, row by row, ``columns`` to a row,
    one data unit each) get boxes; without, a scatter's points (by batch index, found in the
    chart's own traces) get circles ``ring`` pixels across. The same for every pick, so the
    browser keeps the iframe across clicks."""
    config = {
        "chart": chart_selector,
        "cells": cells_selector,
        "columns": columns,
        "inset": INSET,
        "width": WIDTH,
        "colour": colour,
        "layer": LAYER_ID,
        "ring": ring,
    }
    return page_script(_BODY, config)


def cells_html(cells: Sequence[int]) -> str:
    """The hidden element that tells ``script`` which grid cells (``picked_cells``) or batch
    indices to mark."""
    return f"<div data-cells='{json.dumps([int(cell) for cell in cells])}'></div>"
