"""Long output stays fast (issue 23 item 4): tables printed without rich's layout where it adds
nothing — piped without colour, or taller than the terminal — give exactly the text rich gives
when nothing wraps, so the speed-up changes no byte of piped output."""
from __future__ import annotations

import io
import random
import re

import pytest

from gpulease.cli import main, ui

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WORDS = ["", "a", "aws", "us-central1", "p5.48xlarge", "$1,500.00", "1 node × 8 L4",
         "reserved · spot", "café", "-", "a3-highgpu-8g", "x" * 40, "0.123"]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _cell(rng: random.Random):
    from rich.text import Text

    w = rng.choice(WORDS)
    kind = rng.random()
    if kind < 0.15:
        return (w, rng.choice(["bold", "green", "dim", "red"]))
    if kind < 0.25:
        return Text(w)
    if kind < 0.3:
        return None
    return w


def _render(stream, cols, rows, indent, *, rich: bool, monkeypatch) -> str:
    o = ui.Out(stream)
    if rich:
        monkeypatch.setattr(ui.Out, "_plain", lambda self, n: False)
    try:
        o.print(o.table(cols, rows, indent=indent), indent=0)
    finally:
        monkeypatch.undo()
    return stream.getvalue()


@pytest.mark.parametrize("seed", range(40))
def test_plain_tables_are_what_rich_prints(seed, monkeypatch):
    rng = random.Random(seed)
    cols = [ui.Col(rng.choice(["cloud", "$/month", "n", "instance type", "x"]),
                   right=rng.random() < 0.4, wrap=rng.random() < 0.2,
                   style=rng.choice([None, "cyan", "bold"])) for _ in range(rng.randint(1, 7))]
    rows = [[_cell(rng) for _ in cols] for _ in range(rng.randint(0, 12))]
    indent = rng.choice([0, 0, 2, 4])
    plain = _render(io.StringIO(), cols, rows, indent, rich=False, monkeypatch=monkeypatch)
    laid_out = _render(io.StringIO(), cols, rows, indent, rich=True, monkeypatch=monkeypatch)
    assert plain == laid_out


def test_catalog_list_piped_is_unchanged_byte_for_byte(capsys, monkeypatch):
    assert main(["catalog", "list"]) == 0
    plain = capsys.readouterr().out
    monkeypatch.setattr(ui.Out, "_plain", lambda self, n: False)
    monkeypatch.setattr(ui, "_plain_item", lambda item: False)
    assert main(["catalog", "list"]) == 0
    assert capsys.readouterr().out == plain
    assert len(plain.splitlines()) > 700


def test_a_table_taller_than_the_terminal_prints_plainly_with_its_colours(monkeypatch):
    monkeypatch.setenv("LINES", "10")
    monkeypatch.setenv("COLUMNS", "30")  # rich would wrap the wrappable column on a terminal
    cols = [ui.Col("name", style="cyan"), ui.Col("zones", wrap=True), ui.Col("$", right=True)]
    rows = [[f"n{i}", "us-east-1a,us-east-1b,us-east-1c", (f"{i}.00", "bold")]
            for i in range(20)]
    o = ui.Out(Tty())
    t = o.table(cols, rows)
    assert isinstance(t, ui.PlainTable)
    o.print(t)
    out = o.stream.getvalue()
    lines = ANSI.sub("", out).splitlines()
    assert lines[0] == "name  zones                                 $"
    assert lines[1] == "───── ───────────────────────────────── ─────"
    assert lines[2] == "n0    us-east-1a,us-east-1b,us-east-1c   0.00"
    assert len(lines) == 22  # one line per row: nothing wrapped
    assert ANSI.search(out)  # the terminal still gets its colours
    # a table that fits is laid out by rich (wrapping at the terminal's width)
    assert not isinstance(o.table(cols, rows[:3]), ui.PlainTable)


def test_piped_text_is_what_rich_prints(monkeypatch):
    texts = ["", "plain line", "two\nlines", "trailing   ", "  indented", "a · b × c",
             "ends with newline\n", "\n", "a\n\n", "x\n\ny"]
    for indent in (0, 2):
        fast = io.StringIO()
        for t in texts:
            ui.Out(fast).print(t, indent=indent)
        monkeypatch.setattr(ui, "_plain_item", lambda item: False)
        slow = io.StringIO()
        for t in texts:
            ui.Out(slow).print(t, indent=indent)
        monkeypatch.undo()
        assert fast.getvalue() == slow.getvalue()
