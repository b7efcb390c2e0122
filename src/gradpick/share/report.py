"""One self-contained HTML file of the picks: a finding someone without gradpick can open.

``build_report`` turns the export schema's content (``gradpick.share.export.Export``, the same
object
the ``.npz`` and JSON downloads are built from) into one page: the model and its card, the
batch, each pick's image, saliency map and overlay, its prediction, top classes and target, the
method and its settings, the readouts, the trust checks' summary when they ran, and the failure
slices of the store the picks came from when it has them (``gradpick.show.slice_cards``). Every
picture is a PNG data URI and the style sheet is inline, so the file makes no request when
opened: it reads the same offline, attached to a mail, or printed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gradpick import attribution
from gradpick.attribution import AttributionMethod
from gradpick.attribution.notes import MapNote, map_notes, model_note
from gradpick.data import ImageBatch
from gradpick.errors import InputError
from gradpick.gradients.request import GradientRequest
from gradpick.models.spec import InputSpec
from gradpick.models.zoo import LoadedModel
from gradpick.outputs import inference as infer
from gradpick.runtime.measure import MemoryReport
from gradpick.share import export
from gradpick.share.record import embedded_record, shareable
from gradpick.show import render
from gradpick.show.html import (
    Figure,
    escape,
    figures,
    img_tag,
    key_values,
    memory_rows,
)
from gradpick.show.slice_cards import slices_html
from gradpick.show.trust_tables import trust_summary
from gradpick.trust.command import badge_rows
from gradpick.trust.report import CheckOptions, TrustReport, report_dict, run_checks

__all__ = [
    "STYLE",
    "TOP_CLASSES",
    "build_report",
    "of_batch",
    "write_report",
]

TOP_CLASSES = 5
CARD_FIELDS = (
    ("architecture", "architecture"),
    ("parameters", "parameters"),
    ("test_accuracy", "test accuracy"),
    ("evaluated_on", "evaluated on"),
    ("evaluated_images", "evaluated images"),
    ("epochs", "epochs"),
    ("hardware", "trained on"),
)
"""The model card's fields the report lists (the card's own name, then a readable label)."""

STYLE = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial,
  sans-serif; color: #1d1d1f; background: #f5f5f7; margin: 0; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 28px 40px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 10px; border-bottom: 1px solid #d2d2d7; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 0 0 8px; }
.lead { color: #515154; margin: 0 0 8px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 14px; }
.box, .pick { background: #fff; border: 1px solid #d2d2d7; border-radius: 8px; padding: 12px 14px; }
table.kv, table.data { border-collapse: collapse; width: 100%; }
table.kv th { text-align: left; font-weight: 500; color: #515154; padding: 2px 12px 2px 0;
  vertical-align: top; white-space: nowrap; width: 1%; }
table.kv td { padding: 2px 0; overflow-wrap: anywhere; }
table.kv td.hash { font: 11px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
table.data th, table.data td { text-align: left; padding: 3px 10px 3px 0;
  border-bottom: 1px solid #ececf0; }
table.data td.num, table.data th.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.pick { display: flex; gap: 18px; flex-wrap: wrap; margin-bottom: 14px; break-inside: avoid; }
.panels { display: flex; gap: 8px; }
figure { margin: 0; text-align: center; }
figcaption { font-size: 12px; color: #515154; margin-top: 2px; }
img { image-rendering: pixelated; display: block; }
.facts { flex: 1; min-width: 280px; }
.bar { position: relative; height: 16px; background: #ececf0; border-radius: 3px;
  min-width: 120px; }
.bar span { position: absolute; inset: 0 auto 0 0; background: #6a176e; border-radius: 3px; }
.bar.top span { background: #dd513a; }
table.bars { table-layout: fixed; }
table.bars td:first-child { width: 30%; }
table.bars td.num { width: 16%; }
.box table + h3 { margin-top: 16px; }
.ok { color: #1a7f37; font-weight: 600; }
.wrong { color: #b3261e; font-weight: 600; }
.note { color: #8a4b00; background: #fff4e5; border-radius: 6px; padding: 6px 10px; }
.legend { display: flex; align-items: center; gap: 8px; font-size: 12px; color: #515154; }
details pre { white-space: pre-wrap; font-size: 11px; background: #fff; padding: 10px;
  border: 1px solid #d2d2d7; border-radius: 8px; }
footer { margin-top: 28px; font-size: 12px; color: #6e6e73; }
* { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
@media print {
  body { background: #fff; font-size: 11px; }
  main { max-width: none; padding: 0; }
  .box, .pick { border-color: #bbb; }
  details { display: none; }
  h2 { break-after: avoid; }
}
"""
"""The report's whole style sheet, inline: system fonts only, so nothing is fetched."""


def _pixels(images: torch.Tensor) -> torch.Tensor:
    """The export's float pixels in [0, 1] as the uint8 image they were read from."""
    return (images.detach().cpu().float().clamp(0, 1) * 255).round().to(torch.uint8)


def _colour_strip() -> str:
    strip = render.colorize(np.tile(np.linspace(0.0, 1.0, 160), (10, 1)), 1.0)
    return img_tag(strip, "colour scale: dark is 0, bright is the limit")


def _percent(value: float | None) -> str | None:
    return None if value is None else f"{value:.2%}"


def _model_section(model: Mapping[str, Any], card: Mapping[str, Any] | None) -> str:
    rows: list[tuple[str, object]] = [
        ("name", model.get("name")),
        ("kind", model.get("kind")),
        ("identity", model.get("identity")),
        ("weights", model.get("weights") or "none (random or the factory's own)"),
        ("weights sha256", model.get("weights_sha256")),
        ("card sha256", model.get("card_sha256")),
        ("card test accuracy", _percent(model.get("card_test_accuracy"))),
        ("classes", model.get("classes")),
    ]
    spec = model.get("input_spec")
    if spec:
        rows.append(("input", InputSpec.from_json(dict(spec)).describe()))
    for field, label in CARD_FIELDS if card else ():
        value = card.get(field) if card else None
        rows.append((label, _percent(value) if field == "test_accuracy" else value))
    per_class = (card or {}).get("per_class_accuracy")
    if per_class:
        rows.append(("per-class accuracy", ", ".join(f"{k} {v:.1%}" for k, v in per_class.items())))
    return f'<div class="box"><h3>Model</h3>{key_values(rows)}</div>'


def _data_section(record: Mapping[str, Any]) -> str:
    source = record["source"]
    how = None
    if source.get("seed") is not None:
        how = f"a seeded sample, seed {source['seed']}"
    elif source.get("start") is not None:
        how = f"from position {source['start']}"
    rows = [
        ("source", source.get("description")),
        ("split", source.get("split")),
        ("batch", f"{source['N']:,} images" + (f" ({how})" if how else "")),
        ("picked", f"{record['k']} at batch indices {record['indices']}"),
        ("positions in the source", record["source_positions"]),
    ]
    return f'<div class="box"><h3>Data</h3>{key_values(rows)}</div>'


def _method_section(record: Mapping[str, Any]) -> str:
    method = record["method"]
    unit = attribution.get(method["name"]).unit.format(quantity=record["quantity"])
    settings = ", ".join(f"{name} = {value}" for name, value in method["settings"].items())
    rows = [
        ("method", f"{method['label']} ({method['name']})"),
        *_layer_row(record["layer"]),
        ("settings", settings or "none"),
        ("explained", f"{record['quantity']} ({record['target']})"),
        ("map values", unit),
        ("strategy", f"{record['strategy']}, reduction {record['reduction']}"),
    ]
    return f'<div class="box"><h3>Method</h3>{key_values(rows)}</div>'


def _layer_row(layer: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The layer a layer method's maps come from, with its grid; none for pixel maps."""
    if layer is None:
        return []
    grid = "×".join(str(side) for side in layer["grid"])
    return [("layer", f"{layer['name']} ({grid} grid, upsampled to the image)")]


def _readouts_section(record: Mapping[str, Any], memory: MemoryReport | None) -> str:
    rows: list[tuple[str, object]] = [
        ("device", record["device"]),
        ("gradient step", f"{record['timing_ms']:,.1f} ms in {record['chunks']} chunk(s)"),
        ("whole method", f"{record['method_ms']:,.1f} ms"),
        *memory_rows(memory),
    ]
    versions = ", ".join(f"{name} {value}" for name, value in record["versions"].items())
    rows += [("versions", versions), ("created", record["created"])]
    return f'<div class="box"><h3>Readouts</h3>{key_values(rows)}</div>'


def _bars(probabilities: torch.Tensor, class_names: Sequence[str], label: int | None) -> str:
    """The top classes and their probabilities as bars; the true label's name is bold."""
    shown = min(TOP_CLASSES, len(probabilities))
    values, classes = probabilities.topk(shown)
    rows = []
    for rank, (value, chosen) in enumerate(zip(values.tolist(), classes.tolist(), strict=True)):
        name = export.class_name(class_names, int(chosen))
        title = f"<b>{escape(name)}</b>" if chosen == label else escape(name)
        rows.append(
            f"<tr><td>{title}</td>"
            f'<td><div class="bar{" top" if rank == 0 else ""}">'
            f'<span style="width:{100 * value:.1f}%"></span></div></td>'
            f'<td class="num">{value:.1%}</td></tr>'
        )
    return f'<table class="data bars" data-role="probabilities">{"".join(rows)}</table>'


def _pick_section(
    row: int,
    record: Mapping[str, Any],
    figure: Figure,
    probabilities: torch.Tensor,
    class_names: Sequence[str],
    note: MapNote | None = None,
) -> str:
    index, name = record["indices"][row], record["image_names"][row]
    labels = record["labels"]
    label = None if labels is None else int(labels[row])
    predicted = int(probabilities.argmax())
    verdict = ""
    if label is not None:
        right = predicted == label
        verdict = (
            f' <span class="{"ok" if right else "wrong"}">{"correct" if right else "wrong"}</span>'
        )
    captions = {
        "image": "image",
        "saliency": note.short if note is not None else f"saliency 0–{figure.limit:.3g}",
        "overlay": "overlay",
    }
    panels = "".join(
        f"<figure>{img_tag(array, f'{panel} of pick {index}', pick=index, panel=panel)}"
        f"<figcaption>{escape(captions[panel])}</figcaption></figure>"
        for panel, array in figure.panels.items()
    )
    facts = key_values(
        [
            ("position", record["source_positions"][row]),
            ("label", "unlabelled" if label is None else export.class_name(class_names, label)),
            ("explained", f"{record['quantity']} of class {record['class_names'][row]}"),
            ("target value", f"{record['target_values'][row]:.4g}"),
        ]
    )
    prediction = (
        f"<p>predicted <b>{escape(export.class_name(class_names, predicted))}</b> "
        f"({float(probabilities[predicted]):.1%}){verdict}</p>"
    )
    if note is not None:
        prediction += f'<p class="note">{escape(note.text)}</p>'

    return (
        f'<section class="pick" data-pick="{escape(index)}">'
        f"<div><h3>#{escape(index)} · <code>{escape(name)}</code></h3>"
        f'<div class="panels">{panels}</div></div>'
        f'<div class="facts">{prediction}{facts}{_bars(probabilities, class_names, label)}</div>'
        "</section>"
    )


def build_report(
    content: export.Export,
    probabilities: torch.Tensor,
    card: Mapping[str, Any] | None = None,
    trust: TrustReport | None = None,
    title: str | None = None,
    shared_scale: bool = False,
    model_note: str | None = None,
    badges: Sequence[Mapping[str, Any]] = (),
    slices: Mapping[str, Any] | None = None,
    slice_verdicts: Mapping[int, str] | None = None,
) -> str:
    """The report of ``content``'s picks as one HTML document (a str), needing no network.

    ``probabilities`` are the model's class probabilities of the picked images [k, classes], in
    pick order (``gradpick.outputs.inference.infer(model, images).probabilities``); ``card`` is the
    model
    card (``LoadedModel.card``) and ``trust`` the checks of the same picks, when they ran. The
    numbers are the export schema's (``export.metadata``), which the page also carries whole,
    as JSON (``gradpick.share.record``), with no absolute local path. ``model_note`` is said above
    the maps (``attribution.notes.model_note``); a map that shows nothing says why. ``badges``
    are the explorer's verdicts of the same maps (``gradpick.trust.command.badge_rows``), shown
    and kept with the checks. ``slices`` is the slices file kept beside the picks' store
    (``gradpick.slices.stored.read_beside``): a section ranks them, with each one's description,
    verification and mean map, and ``slice_verdicts`` (rank -> verdict in words) beside them.
    """
    record = shareable(export.metadata(content))
    card = shareable(card) if card else card
    k = record["k"]
    if probabilities.dim() != 2 or probabilities.shape[0] != k:
        raise InputError(
            f"Give the class probabilities of the {k} picked images as [k, classes]; "
            f"got shape {tuple(probabilities.shape)}."
        )
    probabilities = probabilities.detach().cpu().float()
    pictures = figures(content.result.maps, _pixels(content.images), shared_scale)
    method = record["method"]["label"]
    heading = title or f"{method} of {k} pick{'s' if k != 1 else ''}"
    said = map_notes(content.result, record["quantity"])
    picks = "".join(
        _pick_section(
            row, record, pictures[row], probabilities[row], content.class_names, said[row]
        )
        for row in range(k)
    )
    warning = "" if model_note is None else f'<p class="note">{escape(model_note)}</p>'
    checked = None if trust is None else {**report_dict(trust), "badges": list(badges)}
    scale = "one scale shared by all picks" if shared_scale else "each pick its own scale"
    checks = ""
    if trust is not None:
        summary = trust_summary(checked or {}, content.class_names)
        checks = f'<h2>Trust checks</h2><div class="box">{summary}</div>'
    found = ""
    if slices is not None:
        found = (
            '<h2>Slices</h2><p class="lead">Where the model fails systematically on the store '
            f"these picks come from (<code>gradpick slices</code>).</p>"
            f'<div class="box">{slices_html(slices, slice_verdicts)}</div>'
        )

    full = json.dumps(record, indent=2, default=str)
    embedded = embedded_record(
        {
            "picks": record,
            "checks": checked,
            "model_note": model_note,
            "slices": _slice_summary(slices),
        }
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(heading)} · gradpick</title><style>{STYLE}</style></head><body><main>"
        f"<h1>{escape(heading)}</h1>"
        f'<p class="lead">{escape(record["source"]["description"])} · model '
        f"<b>{escape(record['model'].get('name'))}</b> · {escape(record['created'])}</p>"
        '<div class="grid">'
        f"{_model_section(record['model'], card)}{_data_section(record)}"
        f"{_method_section(record)}{_readouts_section(record, content.memory)}</div>"
        f"{warning}<h2>Picks</h2>"
        f'<p class="legend">{_colour_strip()} saliency: the largest |value| over the '
        f"channels, 0 to the limit under each map ({escape(scale)}).</p>"
        f"{picks}{checks}{found}"
        "<h2>All fields</h2><details><summary>The export schema's JSON of these picks</summary>"
        f"<pre>{escape(full)}</pre></details>{embedded}"
        f"<footer>Written by gradpick {escape(record['versions'].get('gradpick', ''))}. "
        "This file is self-contained: it loads nothing from the network.</footer>"
        "</main></body></html>\n"
    )


def _slice_summary(slices: Mapping[str, Any] | None) -> list[dict[str, Any]] | None:
    """Each slice's figures for the embedded record (not its members or map: they can be
    long, and the section draws them)."""
    if slices is None:
        return None
    fields = ("rank", "size", "errors", "error_rate", "description", "effect", "verified")
    return [{name: row.get(name) for name in fields} for row in slices.get("slices", [])]


def write_report(path: Path, document: str) -> Path:
    """Write ``document`` to ``path`` through a temporary file beside it, renamed when whole,
    so an interrupted write never leaves a report that looks complete."""
    if path.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"A report ends in .html, not '{path.suffix or path.name}'.")
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(document, encoding="utf-8")
    os.replace(partial, path)
    return path


def of_batch(
    loaded: LoadedModel,
    batch: ImageBatch,
    indices: Sequence[int],
    method: AttributionMethod | None = None,
    target: str | None = None,
    classes: int | None = None,
    strategy: str = "recompute",
    measure_memory: bool = True,
    checks: CheckOptions | None = None,
    source: Mapping[str, Any] | None = None,
    shared_scale: bool = False,
    progress: Callable[[str], None] | None = None,
    slices: Mapping[str, Any] | None = None,
) -> str:
    """The report of ``batch[indices]`` under ``loaded``: maps by ``method`` (the plain
    gradient when None) for ``target`` (None: the method's default, ``attribution.default_target``)
    and ``classes`` as ``input_gradients`` takes them, the
    trust checks with ``checks`` when given, and ``source`` as the export's record of where the
    batch came from (default: the batch's source, all of it). ``progress`` is told each step
    in words as it starts ('maps', then each check and randomised layer). ``slices`` are the
    store's slices for the report's Slices section (``build_report``).

    The engine gets the whole batch, so SmoothGrad's noise is seeded by the batch index and the
    maps are the explorer's for the same batch; 'recompute' forwards only the picks.
    """
    picks = [int(index) for index in indices]
    loaded.check_images(batch.images)
    method = method or attribution.Gradient()
    if checks is not None:  # a sigmoid model's labels are read by their own sigmoid
        checks = replace(checks, output=loaded.output)
    if target is None:
        target = attribution.default_target(
            method.name, batch.labels is not None, classes is not None
        )
    request = GradientRequest.build(
        loaded.module,
        batch.float_images(),
        picks,
        labels=batch.labels,
        target=target,
        classes=classes,
        strategy=strategy,
        measure_memory=measure_memory,
    )
    say = progress or (lambda step: None)
    say(f"maps: {method.label}")
    result = method.attribute(request)
    content = export.Export(
        result,
        indices=picks,
        images=request.picked_images,
        positions=[batch.positions[i] for i in picks],
        names=[batch.names[i] for i in picks],
        labels=None if batch.labels is None else batch.labels[picks].tolist(),
        class_names=batch.class_names,
        quantity=export.quantity(target, classes, batch.class_names),
        model=loaded.identity(),
        source=source or export.source_record(batch.source, len(batch)),
        memory=result.gradients.memory,
    )
    trust = (
        None
        if checks is None
        else run_checks(
            loaded.module,
            request.images,
            picks,
            classes,
            checks,
            progress=lambda done, total: say(f"checks: randomised {done} of {total} layers"),
            stage=lambda name: say(f"checks: {name}"),
            class_names=batch.class_names,
        )
    )
    badges = []
    if checks is not None:
        say("checks: trust badges")
        badges = badge_rows(loaded.module, request.images, picks, classes, checks)
    outputs = infer.infer(loaded.module, batch.images[picks], output=loaded.output)
    return build_report(
        content,
        outputs.probabilities,
        loaded.card,
        trust,
        shared_scale=shared_scale,
        model_note=model_note(outputs.logits, loaded.name),
        badges=badges,
        slices=slices,
    )
