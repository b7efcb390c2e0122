"""The trust checks' record as HTML tables: what the report and the notebook display show.

Every figure is the check's own, read from the record ``gradpick check`` writes
(``gradpick.trust.report.report_dict``); classes are named, not numbered. The ROAD and
class-sensitivity tables are (header, rows, numeric) triples, ``numeric`` the count of the last
columns that are numbers (right-aligned).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gradpick.show.html import class_name, data_table, escape

__all__ = [
    "BADGES_LEAD",
    "ROAD_LEAD",
    "SENSITIVITY_LEAD",
    "Table",
    "badges_table",
    "road_table",
    "sensitivity_table",
    "trust_summary",
]

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


BADGES_LEAD = (
    "The explorer's verdict per map (the same code, with no time budget; each map explaining "
    "the held class's logit): pass, weak, fail, or not run, with what was measured."
)


def badges_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """One row per pick, method and check: the figure, the verdict and its reason."""
    cells: list[tuple[object, ...]] = [
        (
            row["index"],
            row["method"],
            row["check"],
            row["verdict"].replace("_", " "),
            row["reason"],
            "n/a" if row["value"] is None else f"{row['value']:.3f}",
        )
        for row in rows
    ]
    return ("index", "method", "check", "verdict", "what it means", "figure"), cells, 1


def _number(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}g}"


def trust_summary(record: Mapping[str, Any], class_names: Sequence[str] = ()) -> str:
    """The trust checks as HTML tables, from the record ``gradpick check`` writes
    (``gradpick.trust.report.report_dict``)."""
    parts = ["<h3>Randomisation test</h3>"]
    parts.append(
        '<p class="lead">Similarity of each map to the map of the model with its layers '
        "randomised (mean ± std over the picks). A map that stays similar does not depend on "
        "what the model learned.</p>"
    )
    rows = []
    for method, curve in record["randomisation"].items():
        first, last = curve["steps"][0], curve["steps"][-1]
        rows.append(
            (
                method,
                curve["mode"],
                f"{first['layer']}",
                _spread(first["spearman"]),
                f"{last['randomised_layers']} layers",
                _spread(last["spearman"]),
                _spread(last["ssim"]),
            )
        )
    parts.append(
        data_table(
            (
                "method",
                "mode",
                "first randomised",
                "its Spearman",
                "then randomised",
                "Spearman",
                "SSIM",
            ),
            rows,
            numeric=4,
        )
    )
    parts.append("<h3>Completeness (Integrated Gradients)</h3>")
    if not record["completeness"]:
        parts.append(
            '<p class="lead">Not run: it checks Integrated Gradients, which is not '
            "among the checked methods.</p>"
        )
    else:
        parts.append(
            data_table(
                (
                    "index",
                    "class",
                    "baseline",
                    "verdict",
                    "steps",
                    "sum",
                    "F(x) − F(baseline)",
                    "error",
                ),
                (
                    (
                        row["index"],
                        class_name(class_names, row["class"]),
                        row["baseline"],
                        row["verdict"],
                        row["steps"],
                        _number(row["attribution_sum"], 4),
                        _number(row["difference"], 4),
                        "n/a" if row["relative_error"] is None else f"{row['relative_error']:.2%}",
                    )
                    for row in record["completeness"]
                ),
                numeric=4,
            )
        )
    faithful = record["faithfulness"]
    parts.append("<h3>Faithfulness (deletion lower, insertion higher is better)</h3>")
    parts.append(
        data_table(
            ("method", "deletion AUC", "random order", "insertion AUC", "random order"),
            (
                (
                    method,
                    _spread(row["deletion_auc"]),
                    _spread(row["random_deletion_auc"]),
                    _spread(row["insertion_auc"]),
                    _spread(row["random_insertion_auc"]),
                )
                for method, row in faithful["methods"].items()
            ),
            numeric=4,
        )
    )
    for title, lead, (header, cells, numeric) in (
        ("ROAD (remove and debias)", ROAD_LEAD, road_table(record)),
        ("Class sensitivity", SENSITIVITY_LEAD, sensitivity_table(record, class_names)),
    ):
        parts.append(f'<h3>{title}</h3><p class="lead">{escape(lead)}</p>')
        parts.append(data_table(header, cells, numeric=numeric))
    maps = record["class_maps"]
    parts.append("<h3>Top classes</h3>")
    parts.append(
        data_table(
            ("index", "top classes (probability)"),
            (
                (
                    index,
                    ", ".join(
                        f"{class_name(class_names, c)} {p:.1%}"
                        for c, p in zip(classes, probabilities, strict=True)
                    ),
                )
                for index, classes, probabilities in zip(
                    record["indices"], maps["top_classes"], maps["top_probabilities"], strict=True
                )
            ),
        )
    )
    if record.get("badges"):
        header, cells, numeric = badges_table(record["badges"])
        parts.append(f'<h3>Trust badges</h3><p class="lead">{escape(BADGES_LEAD)}</p>')
        parts.append(data_table(header, cells, numeric=numeric))
    times = ", ".join(f"{name} {ms:,.0f} ms" for name, ms in record["milliseconds"].items())
    parts.append(f'<p class="lead">Time per check: {escape(times)}.</p>')
    return "".join(parts)
