"""Every ``gradpick ...`` command line of README.md and docs/, in any code block (those marked
no-test too), parses with the real argument parser: a renamed flag or a wrong example fails."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gradpick.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```|~~~)")
ENDS = {"|", "||", "&&", ";", ">", ">>", "2>", "2>&1", "&"}
"""Shell tokens after which the command line is over (a pipe, a redirect, a next command)."""
ELIDED = "..."
"""A word that stands for options left out ("the same as above"); dropped, the rest parsed."""


def _blocks(text: str) -> list[list[str]]:
    """The lines of each fenced code block, in order."""
    blocks, current, inside = [], [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            if inside:
                blocks.append(current)
                current = []
            inside = not inside
        elif inside:
            current.append(line)
    return blocks


def _commands(lines: list[str]) -> list[str]:
    """Command lines starting with ``gradpick`` (after an optional ``$`` prompt), with their
    ``\\`` continuations joined."""
    joined, pending = [], ""
    for line in lines:
        text = pending + line.strip()
        if text.endswith("\\"):
            pending = text[:-1] + " "
            continue
        pending = ""
        text = text.removeprefix("$ ")
        if text.startswith("gradpick ") or text == "gradpick":
            joined.append(text)
    return joined


def _argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    argv = []
    for word in words[1:]:
        if word in ENDS:
            break
        if word != ELIDED:
            argv.append(word)
    return argv


def _every_command() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in _blocks(page.read_text(encoding="utf-8")):
            for command in _commands(block):
                found.append((str(page.relative_to(REPO)), command))
    return found


COMMANDS = _every_command()


def test_the_docs_hold_command_lines_to_check() -> None:
    assert len(COMMANDS) >= 20, COMMANDS  # every page's examples, not a parser that found none
    pages = {page for page, _ in COMMANDS}
    assert {"docs/cli.md", "docs/guide/triage.md", "docs/guide/sharing.md"} <= pages


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[c for _, c in COMMANDS])
def test_every_documented_command_line_parses(
    page: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        build_parser().parse_args(_argv(command))
    except SystemExit as stop:
        err = capsys.readouterr().err
        assert stop.code == 0, f"{page}: `{command}` does not parse: {err.strip()}"


def test_a_wrong_command_line_is_caught() -> None:
    """The triage guide's old line, a model as a positional argument, fails to parse."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(_argv('gradpick infer resnet20 --data "x" --out outputs'))
