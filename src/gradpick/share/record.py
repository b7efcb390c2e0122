"""What a shared report carries besides its pictures: its whole record, as JSON a script can
read back, with no path of the machine that wrote it.

A report is meant to be attached to a mail or a ticket; the folder it was made from
(``/home/alice/photos``) or the weights' location says nothing to its reader and tells them
about the writer's disk. Every absolute path in the record becomes its last part (``photos``).
The record is embedded whole as ``<script type="application/json" id="gradpick-report">``::

    text = html.split('id="gradpick-report">')[1].split("</script>")[0]
    record = json.loads(text)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["RECORD_ID", "embedded_record", "read_record", "shareable"]

RECORD_ID = "gradpick-report"
"""The id of the report's JSON script element."""

_ABSOLUTE = re.compile(
    r"(?<![\w.~/\\])(?:/(?!/)(?:[^\s/\\'\"<>]+/)+|[A-Za-z]:[\\/](?:[^\s/\\'\"<>]+[\\/])*)"
    r"([^\s/\\'\"<>]*)"
)
"""An absolute POSIX path of two parts or more (not '</' of a tag, nor a URL's '//') or a
Windows one, not part of a word or a relative path; its last part is group 1."""


def _short(text: str) -> str:
    return _ABSOLUTE.sub(lambda found: found.group(1) or "/", text)


def shareable(value: Any) -> Any:
    """``value`` (JSON values: dicts, lists, str, numbers) with every absolute path in a string
    replaced by its last part ('/home/a/photos' becomes 'photos', 'C:\\data\\x.pt' 'x.pt')
    and every NaN or infinity by None, which JSON has no other word for."""
    if isinstance(value, str):
        return _short(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {_short(str(key)): shareable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [shareable(item) for item in value]
    return value


def embedded_record(record: Mapping[str, Any]) -> str:
    """``record`` (``shareable`` already) as a ``<script type="application/json">`` element;
    '</' is escaped so no string in it can end the element early."""
    text = json.dumps(shareable(record), default=str, allow_nan=False).replace("</", "<\\/")
    return f'<script type="application/json" id="{RECORD_ID}">{text}</script>'


def read_record(document: str) -> dict[str, Any]:
    """The record ``embedded_record`` put into the HTML ``document``."""
    start = document.index(f'id="{RECORD_ID}">') + len(f'id="{RECORD_ID}">')
    end = document.index("</script>", start)
    return dict(json.loads(document[start:end]))
