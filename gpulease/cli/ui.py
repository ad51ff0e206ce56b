"""Terminal output of every `gpulease` command: colour, tables, progress, exit reasons, words."""
from __future__ import annotations

import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

from gpulease.money import fmt as money, signed as signed_money  # noqa: F401 (one formatter)
from gpulease.purchase import LABELS, NODE_MODELS
from gpulease.text import plural  # noqa: F401 (re-exported: ui.plural; one plural rule)

# rich is imported inside the functions that draw: `gpulease --help` never pays for it.

# ---- words ---------------------------------------------------------------------------------------
_DIGITS = re.compile(r"(\d+)")


#: EC2's size without a multiplier is one: g4dn.xlarge sorts before g4dn.2xlarge.
_XLARGE = re.compile(r"\.xlarge\b")


def natural_key(value: Any) -> tuple:
    """Sort key that orders digit runs by number: g4dn.xlarge < g4dn.2xlarge < g4dn.12xlarge,
    a2-highgpu-2g < a2-highgpu-8g, europe-west4 < europe-west10."""
    return _natural_key(str(value))


@lru_cache(maxsize=4096)  # tables repeat their clouds, regions and types row after row
def _natural_key(value: str) -> tuple:
    parts = _DIGITS.split(_XLARGE.sub(".1xlarge", value))
    return tuple((0, int(p), "") if i % 2 else (1, 0, p.lower()) for i, p in enumerate(parts)
                 if p or i == 0)


def natural_sorted(items: Iterable, key: Optional[Callable[[Any], Any]] = None) -> list:
    """``sorted`` with :func:`natural_key` applied to ``key(item)`` (or the item itself).

    When ``key`` returns a tuple, each element is keyed on its own."""
    def k(item):
        v = key(item) if key else item
        if isinstance(v, tuple):
            return tuple(natural_key(x) for x in v)
        return natural_key(v)
    return sorted(items, key=k)




#: purchase models in the order a mix is read, with the word printed for each.
PURCHASE_WORDS = tuple((m, LABELS[m]) for m in NODE_MODELS)
MIX_SEP = " · "


def purchase_mix(mix: Any) -> str:
    """"1 reserved · 2 on-demand · 5 spot" (zeros left out; "none" when every count is 0).

    ``mix`` is a mapping with the keys reserved / on_demand / spot, or an object with those
    attributes (gpulease.model.PurchaseMix)."""
    get = mix.get if isinstance(mix, Mapping) else (lambda k, d=0: getattr(mix, k, d))
    parts = [f"{get(k, 0)} {word}" for k, word in PURCHASE_WORDS if get(k, 0)]
    return MIX_SEP.join(parts) or "none"


def model_word(model: str) -> str:
    """A purchase model key as printed: on_demand -> on-demand."""
    return dict(PURCHASE_WORDS).get(model, model.replace("_", "-"))


def nodes_text(nodes: int, gpus_per_node: int, gpu: str) -> str:
    """"1 node × 8 L4", "8 nodes × 8 H100"."""
    return f"{plural(nodes, 'node')} × {gpus_per_node} {gpu}"


def short_type(token: str) -> str:
    """A Pulumi type token as `pulumi preview` prints it: aws:autoscaling/group:Group ->
    aws:autoscaling:Group. Same rule as the Pulumi CLI's display (pkg/backend/display,
    simplifyTypeName): drop the module's last path segment when it is the lower-camel type name;
    any other token (pulumi:providers:aws, a dynamic provider's) is printed whole."""
    parts = token.split(":")
    if len(parts) != 3 or not parts[2]:
        return token
    pkg, module, name = parts
    if "/" not in module:
        return token
    head, file = module.rsplit("/", 1)
    if file != name[0].lower() + name[1:]:
        return token
    return f"{pkg}:{head}:{name}"


# ---- colour policy -------------------------------------------------------------------------------
_state = {"no_color": False, "reason_given": False}


def configure(*, no_color: bool = False) -> None:
    """Called once per `gpulease` invocation (``--no-color``); resets the exit-reason flag."""
    _state["no_color"] = no_color
    _state["reason_given"] = False


def is_tty(stream: IO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def color_enabled(stream: IO, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Colour on ``stream``? ``--no-color`` or NO_COLOR (any non-empty value, no-color.org)
    turn it off and win; FORCE_COLOR (non-empty, force-color.org) turns it on even when piped;
    otherwise only on a terminal that is not TERM=dumb."""
    env = os.environ if environ is None else environ
    if _state["no_color"] or env.get("NO_COLOR", "") != "":
        return False
    if env.get("FORCE_COLOR", "") != "":
        return True
    return is_tty(stream) and env.get("TERM", "") != "dumb"


# ---- tables --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Col:
    """One table column. ``wrap``: may wrap on a narrow terminal (never when piped);
    ``right``: numbers and money align right."""

    header: str
    right: bool = False
    wrap: bool = False
    style: Optional[str] = None


Cell = Union[str, tuple]   # "text" or ("text", "style")

#: a header line, a rule under it, no borders: reads well and greps well.
_PLAIN_BOX = "    \n    \n -  \n    \n    \n    \n    \n    \n"
_TTY_BOX = "    \n    \n ─  \n    \n    \n    \n    \n    \n"

#: width used when output is not a terminal: nothing wraps, so piped text is stable.
PIPE_WIDTH = 10_000

_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.M)


class Out:
    """A rich console over a stream (stdout by default), created at call time so tests that
    swap sys.stdout see the output. Plain text without colour when piped."""

    def __init__(self, stream: Optional[IO] = None, *, err: bool = False):
        self.stream = stream or (sys.stderr if err else sys.stdout)
        self.tty = is_tty(self.stream)
        self.color = color_enabled(self.stream)

    # ---- building blocks
    def text(self, value: Any = "", style: Optional[str] = None):
        from rich.text import Text

        if isinstance(value, Text):
            return value
        return Text(str(value), style=style or "")

    def join(self, *parts: Cell):
        """A Text from "plain" and ("styled", "style") parts."""
        from rich.text import Text

        t = Text()
        for p in parts:
            if isinstance(p, tuple):
                t.append(str(p[0]), style=p[1] if self.color else "")
            else:
                t.append(str(p))
        return t

    def table(self, cols: Sequence[Col], rows: Iterable[Sequence[Cell]], *, indent: int = 0):
        """A table to :meth:`print`. Laid out by rich only where its layout helps: a table that
        fits on the screen of a terminal, or that carries colour. Otherwise (piped without
        colour, or taller than the terminal) it prints plainly (:class:`PlainTable`, the same
        text rich gives when nothing wraps): laying out ~800 rows with rich took over a second
        (`catalog list`, issue 23)."""
        rows = [list(r) for r in rows]
        if self._plain(len(rows)) and PlainTable.handles(rows):
            return PlainTable(cols, rows, indent=indent, rule="─" if self.tty else "-",
                              color=self.color)
        from rich.box import Box
        from rich.padding import Padding
        from rich.table import Table

        t = Table(box=Box(_TTY_BOX if self.tty else _PLAIN_BOX, ascii=not self.tty),
                  show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True,
                  header_style="bold" if self.color else "", show_header=True,
                  highlight=False)
        for c in cols:
            t.add_column(c.header, justify="right" if c.right else "left",
                         no_wrap=not c.wrap, overflow="fold",
                         style=(c.style or "") if self.color else "")
        for row in rows:
            t.add_row(*[self._cell(x) for x in row])
        return Padding(t, (0, 0, 0, indent), expand=False) if indent else t

    def _plain(self, n_rows: int) -> bool:
        if not self.tty:
            return not self.color
        import shutil

        return n_rows + 2 > shutil.get_terminal_size((100, 24)).lines

    def _cell(self, x: Cell):
        from rich.text import Text

        if isinstance(x, Text):
            return x
        if isinstance(x, tuple):
            return Text(str(x[0]), style=x[1] if self.color else "")
        return Text("" if x is None else str(x))

    # ---- output
    def print(self, *items: Any, style: Optional[str] = None, indent: int = 0) -> None:
        """Print text (str / Text) or a renderable (a table); wraps on a terminal only."""
        if not items:
            items = ("",)
        if not self.tty and not self.color and all(_plain_item(i) for i in items) and (
                not indent or all(isinstance(i, PlainTable) or _plain_text(i).strip()
                                  for i in items)):  # rich prints an indented blank as nothing
            # piped without colour: what rich would print, without loading it
            pad = " " * indent
            self.stream.write("".join(
                i.render(indent) if isinstance(i, PlainTable) else "".join(
                    (pad + line).rstrip() + "\n" for line in _plain_text(i).split("\n"))
                for i in items))
            self.stream.flush()
            return
        if any(isinstance(i, PlainTable) for i in items):
            for item in items:
                if isinstance(item, PlainTable):
                    self.stream.write(item.render(indent))
                    self.stream.flush()
                else:
                    self.print(item, style=style, indent=indent)
            return
        from rich.console import Console
        from rich.padding import Padding

        con = Console(file=_Sink(), width=self._width(), color_system="standard" if self.color
                      else None, force_terminal=self.color, no_color=not self.color,
                      highlight=False, markup=False, emoji=False, soft_wrap=False,
                      legacy_windows=False)   # every setting explicit: rich's env reading unused
        with con.capture() as cap:
            for item in items:
                r = self.text(item, style if self.color else None) \
                    if isinstance(item, str) else item
                if indent:
                    r = Padding(r, (0, 0, 0, indent), expand=False)
                con.width = self._fit(con, r)  # print(width=) cannot exceed the console's
                con.print(r)
        out = _TRAILING.sub(r"\1", cap.get())
        self.stream.write(out)
        self.stream.flush()

    def line(self, *parts: Cell, indent: int = 0) -> None:
        if not self.color:  # the parts' styles are not shown: plain text (no rich Text)
            self.print("".join(str(p[0]) if isinstance(p, tuple) else str(p) for p in parts),
                       indent=indent)
            return
        self.print(self.join(*parts), indent=indent)

    def _width(self) -> int:
        if not self.tty:
            return PIPE_WIDTH
        import shutil

        return max(40, shutil.get_terminal_size((100, 24)).columns)

    def _fit(self, con, renderable) -> int:
        """On a terminal, a table never shrinks below what its unwrappable columns need:
        better a line the terminal wraps than a cut price."""
        width = self._width()
        if not self.tty:
            return width
        from rich.measure import Measurement

        # measured without the terminal's limit (Measurement.get clamps to max_width)
        m = Measurement.get(con, con.options.update_width(PIPE_WIDTH), renderable)
        return max(width, m.minimum)


class PlainTable:
    """A table laid out with string operations: each column as wide as its widest cell, cells
    left- or right-justified, two spaces between columns, a rule under the header, no wrapping;
    the text rich prints for :meth:`Out.table` when nothing wraps (a test compares the two).
    With colour (a terminal whose table is taller than the screen), styles are applied as
    ANSI codes after the layout."""

    def __init__(self, cols: Sequence[Col], rows: list[list[Cell]], *, indent: int = 0,
                 rule: str = "-", color: bool = False):
        self.cols, self.rows, self.indent, self.rule, self.color = cols, rows, indent, rule, color

    @staticmethod
    def _text(x: Any) -> tuple[str, Optional[str]]:
        if isinstance(x, tuple):
            return str(x[0]), x[1]
        if x is None:
            return "", None
        return str(x) if isinstance(x, str) else getattr(x, "plain", str(x)), None

    @classmethod
    def handles(cls, rows: list[list[Cell]]) -> bool:
        """Cells of one line each and without styled spans (rich Text with spans): those the
        plain layout reproduces exactly."""
        for row in rows:
            for x in row:
                if type(x) is str:
                    text = x
                elif isinstance(x, (str, tuple)) or x is None:
                    text = cls._text(x)[0]
                elif getattr(x, "spans", None) == [] and isinstance(getattr(x, "plain", None),
                                                                    str):
                    text = x.plain
                else:
                    return False
                if "\n" in text or "\t" in text or "\r" in text:
                    return False
        return True

    def render(self, extra_indent: int = 0) -> str:
        n = len(self.cols)
        text = self._text
        cells = [[(x, None) if type(x) is str else text(x) for x in row]
                 + [("", None)] * (n - len(row)) for row in self.rows]
        heads = [(c.header, None) for c in self.cols]
        every = "".join(t for row in cells for t, _ in row) + "".join(t for t, _ in heads)
        if every.isascii():
            width = len
        else:
            from rich.cells import cell_len as width
        widths = [max(map(width, (row[i][0] for row in cells)), default=0)
                  for i in range(n)]
        widths = [max(w, width(h)) for w, (h, _) in zip(widths, heads)]
        pad = " " * (self.indent + extra_indent)
        paint = _painter() if self.color else None
        right = [c.right for c in self.cols]

        def line(row: Sequence[tuple[str, Optional[str]]], header: bool = False) -> str:
            if paint is None and width is len:
                return (pad + "  ".join([t.rjust(w) if r else t.ljust(w) for (t, _), w, r
                                         in zip(row, widths, right)])).rstrip()
            parts = []
            for i, (t, style) in enumerate(row):
                w = widths[i] - width(t) + len(t)
                t = t.rjust(w) if right[i] else t.ljust(w)
                if paint:
                    style = "bold" if header else " ".join(
                        s for s in (self.cols[i].style, style) if s)
                    t = paint(t, style) if style else t
                parts.append(t)
            return (pad + "  ".join(parts)).rstrip()

        out = [line(heads, header=True),
               pad + " ".join(self.rule * (w + (i < n - 1)) for i, w in enumerate(widths))]
        out.extend(line(row) for row in cells)
        return "\n".join(out) + "\n"


def _plain_text(item: Any) -> str:
    return item if isinstance(item, str) else item.plain


def _plain_item(item: Any) -> bool:
    """Printable piped without rich: a plain table, or text with no tab, no styled span and no
    line rich would wrap at PIPE_WIDTH."""
    if isinstance(item, PlainTable):
        return True
    if not isinstance(item, str):
        if type(item).__name__ != "Text" or getattr(item, "spans", None) != [] \
                or not isinstance(getattr(item, "plain", None), str):
            return False
    text = _plain_text(item)
    return "\t" not in text and "\r" not in text and all(
        len(line) < PIPE_WIDTH for line in text.split("\n"))


def _painter() -> Callable[[str, str], str]:
    """``paint(text, style)``: the text in rich's ANSI codes for the style (standard colours)."""
    from functools import lru_cache

    from rich.color import ColorSystem
    from rich.style import Style

    @lru_cache(maxsize=None)
    def codes(style: str) -> tuple[str, str]:
        ansi = Style.parse(style)._make_ansi_codes(ColorSystem.STANDARD)
        return (f"\x1b[{ansi}m", "\x1b[0m") if ansi else ("", "")

    def paint(text: str, style: str) -> str:
        start, end = codes(style)
        return f"{start}{text}{end}" if start and text.strip() else text
    return paint


class _Sink:
    """Write target of the capturing console (its output is taken with capture())."""

    def write(self, s: str) -> int:
        return len(s)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def out() -> Out:
    return Out()


def err() -> Out:
    return Out(err=True)


# ---- exit reasons --------------------------------------------------------------------------------
#: what each exit code means, as printed after "exit N"; the codes live in gpulease.errors.
def exit_meanings() -> dict[int, str]:
    from gpulease.errors import (EXIT_BAD_INPUT, EXIT_COST_INCREASE, EXIT_FAILED, EXIT_OK,
                                 EXIT_POLICY)

    return {EXIT_OK: "ok", EXIT_FAILED: "failed at run time",
            EXIT_BAD_INPUT: "bad input, nothing was done",
            EXIT_COST_INCREASE: "cost over a gate threshold (--fail-on-increase, gpulease:gate.block)",
            EXIT_POLICY: "a mandatory guardrail failed or a conformance error was found"}


def exit_reason(code: int, why: str) -> int:
    """Print (stderr) why the command exits with ``code``; returns ``code``."""
    e = err()
    e.line((f"exit {code}", "bold red"), f" ({exit_meanings().get(code, 'error')}): {why}")
    _state["reason_given"] = True
    return code


def error(message: str) -> None:
    """Print an "error: ..." line (stderr); it is the reason of the exit that follows."""
    e = err()
    first, *rest = str(message).split("\n")
    e.line(("error:", "bold red"), f" {first}")
    for r in rest:
        e.print(r)
    _state["reason_given"] = True


def warning(message: str) -> None:
    err().line(("warning:", "yellow"), f" {message}")


def reason_given() -> bool:
    return bool(_state["reason_given"])


def mark_reason_given() -> None:
    _state["reason_given"] = True


# ---- progress ------------------------------------------------------------------------------------
class Steps:
    """The steps of a long command, on stderr. On a terminal: one spinner line showing the
    current step and the elapsed time, erased at the end. Otherwise: one plain line per step,
    "<title>: <step>", unless ``piped_lines`` is False (`--json`: a script reading stderr sees
    only warnings and errors). Nothing goes to stdout, so `--json` output stays clean."""

    def __init__(self, title: str, *, enabled: bool = True, piped_lines: bool = True):
        self.title = title
        self.stream = sys.stderr
        self.live = enabled and is_tty(self.stream) and os.environ.get("TERM", "") != "dumb"
        self.enabled = enabled and (self.live or piped_lines)
        self.t0 = time.monotonic()
        self._progress = None
        self._task = None

    def __enter__(self) -> "Steps":
        if self.live:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            con = Console(file=self.stream, no_color=not color_enabled(self.stream),
                          highlight=False, markup=False, emoji=False)
            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                      TimeElapsedColumn(), console=con, transient=True,
                                      redirect_stdout=False, redirect_stderr=False)
            self._progress.start()
            self._task = self._progress.add_task(self.title, total=None)
        return self

    def step(self, message: str) -> None:
        """The command moved on to ``message``."""
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.update(self._task, description=f"{self.title}: {message}")
        else:
            print(f"{self.title}: {message}", file=self.stream, flush=True)

    def note(self, message: str) -> None:
        """A line that stays (written files), printed above the spinner; quiet like the steps."""
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=self.stream, flush=True)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


@contextmanager
def steps(title: str, *, enabled: bool = True, piped_lines: bool = True) -> Iterator[Steps]:
    s = Steps(title, enabled=enabled, piped_lines=piped_lines)
    with s:
        yield s
