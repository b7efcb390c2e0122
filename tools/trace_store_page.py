"""Where the explorer's first page goes with a large store, step by step, without a browser.

Runs ``app.py --outputs STORE`` once with ``streamlit.testing.v1.AppTest`` (one script run, as
a first visit makes it) with timers around the steps a first page may take: opening the store,
reading the images, the stored outputs, the hover lines and thumbnails, the figures and their
serialisation. Steps nest (the figures are built inside the charts' cache calls), so the rows do
not add up to the total; each says what that step alone costs. A second run on the same
(warm) caches follows, as a visitor's next script run.

    PYTHONPATH=src python tools/trace_store_page.py runs/store50k [--tab Triage]
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

STEPS: tuple[tuple[str, str, str], ...] = (
    ("load the model", "gradpick.ui.service", "load_model"),
    ("open the image source", "gradpick.outputs.stores", "stored_source"),
    ("open the store (Parquet)", "gradpick.outputs.store_format", "open_store"),
    (
        "the folder's fingerprint (a stat per image)",
        "gradpick.data.sources",
        "FolderSource.fingerprint",
    ),
    ("read the images (decode, or open lazily)", "gradpick.ui.service", "read_batch"),
    ("decode the images a view shows (lazy)", "gradpick.data.batches", "LazyPixels._decode"),
    ("stored outputs of the batch", "gradpick.outputs.stores", "stored_result"),
    ("hover lines", "gradpick.ui.service", "describe_indices"),
    ("hover thumbnails' atlas", "gradpick.ui.browser.hover", "atlas"),
    ("thumbnail sheet (one page)", "gradpick.ui.figures", "thumbnail_sheet"),
    ("thumbnail grid figure", "gradpick.ui.figures", "thumbnail_grid"),
    ("confidence/loss scatter figure", "gradpick.ui.figures", "outputs_scatter"),
    ("read the embeddings", "gradpick.outputs.stores", "_embeddings_of"),
    ("feature-space projection (PCA)", "gradpick.picking.feature_space", "project"),
    ("feature-space scatter figure", "gradpick.ui.figures", "embedding_scatter"),
    ("table frame", "gradpick.ui.service", "batch_table"),
    ("triage (scores and neighbours)", "gradpick.triage.ranking", "triage"),
    ("triage: the neighbours kept beside the store", "gradpick.triage.ranking", "kept_neighbours"),
    ("triage: the slices that explain errors", "gradpick.triage.ranking", "explained_by_slices"),
    ("the two models lined up (compare)", "gradpick.compare", "pair"),
    ("the comparison's flips", "gradpick.compare", "flips"),
    ("the comparison's classes", "gradpick.compare", "per_class"),
    ("the comparison's confusion difference", "gradpick.compare", "confusion_difference"),
    ("the comparison's drift ranking", "gradpick.compare", "drift_table"),
    ("the comparison panel", "gradpick.ui.panels.compare", "render"),
    ("plotly_chart (serialise, send)", "streamlit", "plotly_chart"),
    ("dataframe (serialise, send)", "streamlit", "dataframe"),
)
"""(row, module, attribute): what each timer wraps; a missing one is skipped."""


def _wrap(totals: dict[str, float], row: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals[row] += time.perf_counter() - started

    return timed


def install(totals: dict[str, float]) -> None:
    """Wrap every step of ``STEPS`` that exists in this version of the code."""
    for row, module_name, attribute in STEPS:
        try:
            owner: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        if hasattr(owner, name):
            setattr(owner, name, _wrap(totals, row, getattr(owner, name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("--tab", default=None, help="open this explorer tab (default: Explore)")
    parser.add_argument(
        "--view",
        default=None,
        help="after the two runs, open this Explore view (e.g. 'Feature space') and trace that "
        "run too: the view's first opening",
    )
    parser.add_argument(
        "--click",
        type=int,
        default=None,
        help="after the two runs, pick this image as a thumbnail's click does and trace that run",
    )
    parser.add_argument(
        "--compare-with", default=None, help="a second store the Compare tab compares with"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from streamlit.testing.v1 import AppTest

    from gradpick.ui import keys

    totals: dict[str, float] = defaultdict(float)
    install(totals)
    sys.argv = ["app.py", "--outputs", str(Path(args.store).resolve())]
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    if args.tab:
        app.session_state[keys.EXPLORER_TAB] = args.tab
    if args.compare_with:
        app.session_state[keys.COMPARE_WITH] = keys.COMPARE_STORED
        app.session_state[keys.COMPARE_OUTPUTS] = str(Path(args.compare_with).resolve())
    rows: list[tuple[str, float]] = []
    runs = ["first run", "second run (warm caches)"]
    if args.view:
        runs.append(f"the view '{args.view}' opened")
    if args.click is not None:
        runs.append(f"a click on thumbnail {args.click}")
    for run in runs:
        totals.clear()
        if run.startswith("the view"):
            app.session_state[keys.OUTPUTS_TAB] = args.view
        if run.startswith("a click"):
            points = [{"customdata": args.click}]
            app.session_state[keys.GRID_CHART] = {
                "selection": {"points": points, "box": [], "lasso": []}
            }
        started = time.perf_counter()
        app.run()
        total = time.perf_counter() - started
        problems = [e.value for e in app.exception] + [e.value for e in app.error]
        if problems:
            print(f"{run}: {problems}", file=sys.stderr)
        rows += [(f"{run}: {row}", totals[row]) for row, _, _ in STEPS if totals.get(row)]
        rows.append((f"{run}: the whole script run", total))
    print("| step | seconds |\n|---|---:|")
    for row, seconds in rows:
        print(f"| {row} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
