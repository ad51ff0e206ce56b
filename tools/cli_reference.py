"""docs/cli.md, generated from the `gpulease` parsers so the reference cannot drift from the code.

Run: python -m tools.cli_reference > docs/cli.md   (tests/test_cli_output.py checks it is current)
"""
from __future__ import annotations

import argparse
import json
from typing import Iterator

from gpulease import datafiles
from gpulease.cli import COMMANDS, EPILOG, build_parser

INTRO = """\
# The `gpulease` command

Generated from the command's parsers by `python -m tools.cli_reference > docs/cli.md`; a test
fails when this file and the code disagree. `gpulease COMMAND --help` prints the same text.

| command | what it does |
| --- | --- |
{commands}

## Output

- **Terminal or pipe.** On a terminal the tables have a bold header and colour (money in bold,
  mandatory findings red, advisory yellow) and prose wraps at the terminal's width; a table
  never shrinks below what its unwrappable columns need, so a price or a type name is never cut.
  When stdout is not a terminal the text is plain and stable for scripts: no colour codes, no
  wrapping, no trailing spaces, a `-` rule under each table header.
- **Colour switches.** `--no-color` (before or after the command name) and `NO_COLOR` (any
  non-empty value, [no-color.org](https://no-color.org)) turn colour off and win;
  `FORCE_COLOR` (any non-empty value, [force-color.org](https://force-color.org)) turns it on
  when piped (the layout stays the plain one); `TERM=dumb` counts as no terminal.
- **Words.** Instance types, regions, zones and catalog versions are listed in natural order
  (`g4dn.xlarge`, `g4dn.2xlarge`, `g4dn.12xlarge`; `europe-west4` before `europe-west10`);
  counts agree with their noun ("1 node", "2 nodes"); a purchase mix reads
  `1 reserved · 2 on-demand · 5 spot` (zeros left out); resource types are shown the way
  `pulumi preview` shows them (`aws:autoscaling:Group` for `aws:autoscaling/group:Group`), the
  JSON keeps the full token.
- **Progress** goes to stderr, never stdout, for the commands that can take seconds (`plan`,
  `catalog refresh`, `catalog import`, `reap`): on a terminal one spinner line with the current
  step and the elapsed time, erased when done; when stderr is not a terminal one line per step
  (`planning prod: running the Pulumi program under mocks (stacks/Pulumi.prod.yaml)`), except
  with `--json`, where a script reading stderr sees only warnings, errors and the exit reason.
- **One convention for output flags.** Every command that prints a report takes
  `--format table|json` (`plan` also `html`: the self-contained report) and `--out FILE`
  (the report goes to FILE instead of stdout, written whole or not at all, with `wrote FILE` on
  stderr). `--json` is the alias of `--format json`, `plan --html FILE` still writes the HTML
  report beside the text. Where `--out` already names what a command writes (`render --out
  DIR`, `catalog refresh|import --out PATH`), it keeps that meaning and only `--format` is
  added. A bad value gets a suggestion (`--format jsn` → did you mean "json"; `--formt` →
  did you mean "--format").
- **`--format json`** prints exactly one JSON document on stdout; its shape only ever gains
  keys. It is strict JSON: never NaN or Infinity.
- **`plan --diff`** prints the cost diff (resources and clusters: before, after, change), a
  one-line summary of the plan and, with `--fail-on-increase`, the gate's verdict with the
  reason exit 3 gives (`diff.gate` in the JSON); `--show-plan` prints the whole plan first.

## The cost gate

`gpulease plan --stack prod --diff BASELINE.json --fail-on-increase 10` exits 3 when the
stack's total monthly cost is more than 10 % above the baseline's. What it trusts:

- **The plan it computes now**: the stack file and the catalog of the checkout it runs in.
- **The baseline only as far as it checks out.** A saved plan is untrusted input
  (`gpulease/planner/saved.py`): it is read through the same input boundary as every other file
  (at most 64 MiB, UTF-8, JSON without NaN or Infinity, at most 64 levels deep, no number
  beyond 10^15); its `format` must be one this gpulease reads (`gpulease-plan/1`); every
  resource needs a Pulumi `urn` (none listed twice), `type`, `name`, `cluster` and a
  `monthly_usd` that is a finite number of USD, >= 0; every other `*_usd` amount must be finite
  (and >= 0 unless it is a difference such as `headroom_usd`); and `totals.monthly_usd` must
  equal the sum of the resources' `monthly_usd`. Anything else is exit 2 naming the file and
  the field, before the plan runs. The gate then compares **sums of resources**, never a total
  a file states.
- `--fail-on-increase` takes only a finite number >= 0 (`nan`, `inf` or `-5` are refused).
- **Thresholds teams set**: `gpulease:gate` in the stack file (`warn` / `block` on the monthly
  $ increase, % increase and total, and `acknowledged` labels) is judged on every `plan`; the
  verdict is the plan JSON's `gate` object, a crossed block exits 3 unless a listed label is
  passed in with `--ack LABEL` or `GPULEASE_GATE_ACK` (then it is a recorded warning, exit 0),
  and `--fail-on-increase PCT` is its flag form (`block.delta_pct`). The CrossGuard pack
  enforces the same thresholds (docs/guardrails.md "Thresholds").
- `--json` is strict JSON: NaN or Infinity never reach a document (a test parses every
  command's output with a parser that rejects them).

What it cannot know: whether a baseline that passes these checks is the plan of the target
branch. A file whose every resource is priced higher is consistent and would let a dearer
change through. The baseline is not signed (a key the pull request's CI job can read, the pull
request can use too); instead **CI must produce the baseline itself, from the target branch**,
with the target branch's own gpulease, never from a file in the change under review, and the
job definition must be one the change cannot edit (on GitHub, a required check whose workflow
comes from the target branch). For example (GitHub Actions):

```yaml
- uses: actions/checkout@v4                       # the change under review
- uses: actions/checkout@v4
  with: {ref: "${{ github.base_ref }}", path: base}  # the target branch
- run: |
    python3 -m venv base/.venv
    base/.venv/bin/pip install -q -r base/requirements.txt -c base/constraints.txt
    (cd base && .venv/bin/gpulease plan --stack prod --json > "$RUNNER_TEMP/baseline.json")
    python3 -m venv .venv
    .venv/bin/pip install -q -r requirements.txt -c constraints.txt
    .venv/bin/gpulease plan --stack prod --diff "$RUNNER_TEMP/baseline.json" --fail-on-increase 10
```

A baseline edited by hand is refused, here one whose stated total was raised:

```sh
gpulease plan --stack dev --json > /tmp/dev-baseline.json
python3 -c 'import json; d = json.load(open("/tmp/dev-baseline.json")); d["totals"]["monthly_usd"] = 1e9; json.dump(d, open("/tmp/edited.json", "w"))'
gpulease plan --stack dev --diff /tmp/edited.json --fail-on-increase 10 || test $? -eq 2
```

## Exit codes

Every non-zero exit prints its reason on stderr: input errors as `error: FILE: CONFIG.PATH:
what is wrong (did you mean ...)`, the others as `exit N (meaning): reason`.

| code | meaning | reason printed (examples) |
| --- | --- | --- |
| 0 | ok | - |
| 1 | failed at run time | `exit 1 (failed at run time): a cloud call failed for 1 cluster: dev/alpha (aws us-west-2); the other clusters were handled`; a bug: `error: internal error (KeyError: 'x'): this is a bug in gpulease, not in your input; the full report is in /tmp/gpulease-crash-1a2b.txt — please attach it to an issue` |
| 2 | bad input, nothing was done | `error: --cluster: no cluster "trian" in stack x (did you mean "train"?); clusters: train, dev` |
| 3 | cost over a gate threshold (`--fail-on-increase`, `gpulease:gate.block`) not acknowledged | `exit 3 (cost over a gate threshold (--fail-on-increase, gpulease:gate.block)): the total monthly cost rose +$250.00 from $1,000.00 (staging) to $1,250.00 (prod), +25.0%, which is 15.0 points over --fail-on-increase 10%` |
| 4 | a mandatory guardrail failed or a conformance error was found | `exit 4 (...): 1 mandatory guardrail violation (budget-cap) block the deploy; fix them and plan again` |

When both 3 and 4 apply, both reasons are printed and the exit code is 4: a plan the clouds
would reject cannot be deployed at any cost. The codes are defined once, in `gpulease/errors.py`.

An exception gpulease did not expect is never printed as a traceback: the command prints the
one `internal error` line above and exits 1, and the full report (version, command line, Python,
platform, traceback) is written to `$GPULEASE_CRASH_DIR` if set, else the system's temporary
directory (`gpulease/cli/crash.py`).

## `--help` speed

Every help screen answers without importing Pulumi, the cloud SDKs, SciPy, pydantic, YAML,
Jinja2 or rich: only the module of the command asked for is imported, and commands import their
dependencies when they run (`reap --help` reads its defaults from `gpulease/reaper/defaults.py`,
plain constants the reaper's settings model uses too). `python bench/cli_help.py --write`
measures every screen (each run in a fresh interpreter, gpulease compiled to bytecode first, as
an installed package has it) and records the figures in `docs/cli-help-speed.json`, which this
table is generated from:

{help_speed}

Before issue 15's work (main at b7fea39) `gpulease --help` took 0.244 s and imported 306
modules (pydantic, YAML, Jinja2); issue 15 measured 2.7 s before SciPy was taken off the
`gpulease.config` import path.

## Examples

Run from the repository root; everything but `catalog refresh` and `reap` (which call the
clouds, or the local emulators of docs/reaper.md) runs offline:

```sh
gpulease plan --stack dev
gpulease plan --stack staging --json > /tmp/staging-plan.json
gpulease plan --stack prod --diff /tmp/staging-plan.json            # only changed money
gpulease plan --stack prod --diff staging --diff-all                # every change, $0.00 too
gpulease plan --stack prod --diff /tmp/staging-plan.json --fail-on-increase 10 || echo "exit $?"
gpulease plan --stack prod --diff staging --show-plan                 # the plan, then the diff
gpulease catalog list --gpu H100 --format json --out /tmp/h100.json
gpulease explain --stack prod --cluster pretrain
gpulease catalog list --gpu L4 --cloud gcp
gpulease catalog versions
gpulease render --stack dev --cluster sandbox --out /tmp/boot
NO_COLOR=1 gpulease catalog list --gpu H100 | head -5
```

## Top level

```text
{top}
```
"""


#: the figures `python bench/cli_help.py --write` records (the "--help speed" table), in the
#: checkout's docs/ beside the package
HELP_SPEED = datafiles.package_root().parent / "docs" / "cli-help-speed.json"


def _help_speed_table() -> str:
    """docs/cli-help-speed.json as a table: each command's median CPU and wall time, modules."""
    try:
        rec = json.loads(HELP_SPEED.read_text(encoding="utf-8"))
    except OSError:
        return ("(no figures recorded: run `python bench/cli_help.py --write` in a checkout, "
                "then regenerate this file)")
    ref = rec["reference"]
    rows = ["| command | CPU s | wall s | x empty interpreter (CPU) | modules | heavy packages |",
            "| --- | ---: | ---: | ---: | ---: | --- |",
            f"| `{ref['command']}` (reference) | {ref['cpu_s']:.3f} | {ref['wall_s']:.3f} | 1.0x "
            "| - | - |"]
    for r in rec["screens"] + [rec["catalog_list"]]:
        what = ", ".join(r.get("heavy", [])) or "none"
        if "lines" in r:
            what = f"{r['lines']} lines of output"
        rows.append(f"| `{r['command']}` | {r['cpu_s']:.3f} | {r['wall_s']:.3f} | "
                    f"{r['cpu_s'] / ref['cpu_s']:.1f}x | {r.get('modules') or '-'} | {what} |")
    rows += ["", f"Medians of {rec['repeat']} runs each; measured {rec['measured']} (load at the "
                 f"end: {rec['end'].removeprefix('load ')}), commit {rec['commit']}. CPU time is "
                 "the figure to compare on a shared machine; the empty interpreter beside it is "
                 "the reference measured in the same run."]
    return "\n".join(rows)


def _commands_table() -> str:
    return "\n".join(f"| [`{name}`](#gpulease-{name}) | {summary} |"
                     for name, summary in COMMANDS.items())


def _subparsers(p: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _flag(a: argparse.Action) -> str:
    if not a.option_strings:
        text = f"`{a.metavar or a.dest}`"
    elif a.nargs == 0:
        text = f"`{', '.join(a.option_strings)}`"
    else:
        text = f"`{', '.join(a.option_strings)} {a.metavar or a.dest.upper()}`"
    return text.replace("|", "\\|")   # a table cell, even inside backticks


def _default(a: argparse.Action) -> str:
    if a.default in (None, False, argparse.SUPPRESS, []) or a.nargs == 0:
        return ""
    return f"`{a.default}`"


def _options(p: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        text = (a.help or "").replace("%%", "%").replace("|", "\\|")
        if "%(default)s" in text:
            text = text.replace("%(default)s", str(a.default))
        if a.choices and not isinstance(a, argparse._SubParsersAction):
            text += f" (one of: {', '.join(map(str, a.choices))})"
        rows.append(f"| {_flag(a)} | {_default(a)} | {text} |")
    return rows


def _section(title: str, p: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `{title}`", ""]
    if p.description:
        out += [" ".join(p.description.split()), ""]
    out += ["```text", p.format_usage().strip(), "```", ""]
    out += _options(p) + [""]
    if p.epilog:
        out += ["```text", p.epilog.strip("\n"), "```", ""]
    for name, child in _subparsers(p):
        out += _section(f"{title} {name}", child, level + 1)
    return out


def render_markdown() -> str:
    import os

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"          # argparse wraps usage lines at the terminal's width
    try:
        return _render()
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def _render() -> str:
    parser = build_parser(full=True)
    lines = INTRO.replace("{commands}", _commands_table()).replace(
        "{top}", parser.format_help().strip("\n")).replace(
        "{help_speed}", _help_speed_table()).splitlines()
    lines.append("")
    for name, p in _subparsers(parser):
        lines += _section(f"gpulease {name}", p, 2)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.stdout.write(render_markdown())
