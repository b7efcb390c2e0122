"""The trust checks as one run: its printed summary and its JSON file.

``gradpick check`` (``gradpick.cli.check``) parses its options, loads the model, the data and
the picks, and hands them to ``run`` as plain values.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradpick.data import ProgressCallback
from gradpick.trust.engine import held_classes, served_view
from gradpick.trust.faithfulness import RANDOM
from gradpick.trust.quick import VERDICT_WORDS, quick_checks, verdict_rows
from gradpick.trust.report import CheckOptions, TrustReport, report_dict, run_checks

__all__ = ["badge_rows", "run", "summary", "write_json"]


def _mean(values: dict[str, Any]) -> str:
    return "n/a" if values["mean"] is None else f"{values['mean']:.3f}"


def summary(record: dict[str, Any]) -> str:
    """A few lines per check, from the JSON record."""
    lines = ["randomisation (Spearman / SSIM, mean over picks, at the first and last step):"]
    for method, curve in record["randomisation"].items():
        first, last = curve["steps"][0], curve["steps"][-1]
        lines.append(
            f"  {method:<22} {first['layer']}: {_mean(first['spearman'])} / "
            f"{_mean(first['ssim'])}   all {last['randomised_layers']} layers: "
            f"{_mean(last['spearman'])} / {_mean(last['ssim'])}"
        )
    if not record["completeness"]:
        lines.append(
            "completeness: not run (it checks Integrated Gradients, not among the methods)"
        )
    else:
        lines.append("completeness (IG: sum of attributions vs F(x) - F(baseline)):")
    for row in record["completeness"]:
        error = "n/a" if row["relative_error"] is None else f"{row['relative_error']:.2%}"
        lines.append(
            f"  #{row['index']:<5} {row['baseline']:<14} {row['steps']:>5} steps  "
            f"sum {row['attribution_sum']:>9.4g}  difference {row['difference']:>9.4g}  "
            f"error {error}" + ("" if row["reached"] else f"  {row['verdict']}")
        )
    faithful = record["faithfulness"]
    lines.append(f"faithfulness (AUC, mean over picks; {RANDOM} order in brackets):")
    for method, row in faithful["methods"].items():
        lines.append(
            f"  {method:<22} deletion {_mean(row['deletion_auc'])} "
            f"({_mean(row['random_deletion_auc'])})  insertion {_mean(row['insertion_auc'])} "
            f"({_mean(row['random_insertion_auc'])})"
        )
    lines.append("ROAD (AUC under noisy linear imputation, mean over picks; gap = LeRF - MoRF):")
    for method, row in record["road"]["methods"].items():
        lines.append(
            f"  {method:<22} MoRF {_mean(row['morf_auc'])}  LeRF {_mean(row['lerf_auc'])}  "
            f"gap {_mean(row['gap'])}"
        )
    lines.append("class sensitivity (mean Spearman of |map| vs another class's; picks flagged):")
    for method in record["settings"]["methods"]:
        parts = []
        for kind in record["settings"]["class_sensitivity"]["kinds"]:
            rows = [
                r for r in record["class_sensitivity"] if (r["method"], r["kind"]) == (method, kind)
            ]
            values = [row["spearman"] for row in rows if row["spearman"] is not None]
            mean = f"{sum(values) / len(values):.3f}" if values else "n/a"
            flagged = sum(row["insensitive"] for row in rows)
            parts.append(f"{kind} {mean} ({flagged} of {len(rows)})")
        lines.append(f"  {method:<22} " + "  ".join(parts))
    return "\n".join(lines)


def badge_rows(
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    classes: int | None,
    options: CheckOptions,
) -> list[dict[str, Any]]:
    """The explorer's trust badges of every pick and method (``quick.verdict_rows``), with no
    time budget: each map explains the held class's logit, as every other check here does."""
    held = held_classes(served_view(model), images, indices, classes)
    rows: list[dict[str, Any]] = []
    for method in options.methods:
        found = quick_checks(
            model,
            images,
            indices,
            method,
            "logit",
            held,
            options.settings,
            budget_s=math.inf,
            output=options.output,
        )
        rows += verdict_rows(found)
    return rows


def _badge_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["trust badges (the explorer's verdicts; picks per verdict):"]
    for method in dict.fromkeys(row["method"] for row in rows):
        for check in dict.fromkeys(row["check"] for row in rows if row["method"] == method):
            verdicts = [r["verdict"] for r in rows if (r["method"], r["check"]) == (method, check)]
            counts = "  ".join(
                f"{word} {verdicts.count(word)}"
                for word in VERDICT_WORDS.values()
                if verdicts.count(word)
            )
            lines.append(f"  {method:<22} {check:<13} {counts}")
    return lines


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Write through a temporary file, so an interrupted run never leaves a partial report."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(record, indent=2, allow_nan=False) + "\n")
    os.replace(partial, path)


def _name(class_names: Sequence[str], index: int) -> str:
    return class_names[index] if 0 <= index < len(class_names) else str(index)


def run(
    out: Path,
    options: CheckOptions,
    model: nn.Module,
    images: torch.Tensor,
    indices: Sequence[int],
    classes: int | None,
    class_names: Sequence[str],
    context: dict[str, Any],
    progress: ProgressCallback | None = None,
) -> TrustReport:
    """Run the checks, print the summary and write ``out`` with ``context`` merged in;
    ``progress(done, total)`` follows the randomised layers."""
    result = run_checks(model, images, indices, classes, options, progress=progress)
    record = report_dict(result)
    record = {
        **context,
        **record,
        "class_names": [_name(class_names, index) for index in record["classes"]],
        "badges": badge_rows(model, images, indices, classes, options),
    }
    print(summary(record))
    print("\n".join(_badge_lines(record["badges"])))
    write_json(out, record)
    print(f"\nwrote {out}")
    return result
