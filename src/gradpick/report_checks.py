"""The report's tables of ROAD and class sensitivity, from the JSON ``gradpick check`` writes.

Each function returns a table as (header, rows, numeric): ``numeric`` is how many of the last
columns are numbers (right-aligned); ``gradpick.report`` draws it. Classes are named, not
numbered, and every figure is the check's own (``trust.report.report_dict``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gradpick.export import class_name

__all__ = ["ROAD_LEAD", "SENSITIVITY_LEAD", "Table", "road_table", "sensitivity_table"]

Table = tuple[tuple[str, ...], list[tuple[object, ...]], int]

ROAD_LEAD = (
    "Rong et al.'s ROAD: the explained class's probability as growing shares of the most "
    "(MoRF) or least (LeRF) relevant pixels are removed and filled by noisy linear "
    "imputation; area under each curve, mean ± std over the picks. A faithful map has a low "
    "MoRF and a high LeRF area: a positive gap."
)
SENSITIVITY_LEAD = (
    "Spearman correlation of each pick's |map| for its class with its |map| for another class "
    "(the runner-up, a random one). Near 1 the map barely depends on the class it explains, "
    "which flags it (at or above the threshold)."
)


def _spread(values: Mapping[str, float | None]) -> str:
    mean, std = values["mean"], values["std"]
    return "n/a" if mean is None else f"{mean:.3f} ± {std or 0.0:.3f}"


def road_table(record: Mapping[str, Any]) -> Table:
    """One row per method: MoRF and LeRF areas and their gap."""
    rows: list[tuple[object, ...]] = [
        (method, _spread(row["morf_auc"]), _spread(row["lerf_auc"]), _spread(row["gap"]))
        for method, row in record["road"]["methods"].items()
    ]
    return ("method", "MoRF AUC (lower)", "LeRF AUC (higher)", "gap LeRF − MoRF"), rows, 3


def sensitivity_table(record: Mapping[str, Any], class_names: Sequence[str]) -> Table:
    """One row per pick, method and kind of other class, with both classes named."""
    threshold = record["settings"]["class_sensitivity"]["insensitive_spearman"]
    rows: list[tuple[object, ...]] = [
        (
            row["index"],
            row["method"],
            row["kind"].replace("_", "-"),
            class_name(class_names, row["class"]),
            class_name(class_names, row["other_class"]),
            f"flagged (≥ {threshold:g})" if row["insensitive"] else "changes with the class",
            "n/a" if row["spearman"] is None else f"{row['spearman']:.3f}",
        )
        for row in record["class_sensitivity"]
    ]
    header = ("index", "method", "other", "class", "other class", "verdict", "Spearman")
    return header, rows, 1
