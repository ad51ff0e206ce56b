"""The `gpulease` command's presentation: words, sorting, colour policy, tables, progress, help,
exit reasons. Plain-mode snapshots pin what scripts and tests read when the output is piped."""
from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpulease.cli import COMMANDS, build_parser, main, ui
from gpulease.cli.plan import _exit, blocking_reason, explain_hint, increase_reason, render_plan
from gpulease.errors import EXIT_BAD_INPUT, EXIT_COST_INCREASE, EXIT_FAILED, EXIT_OK, EXIT_POLICY

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def plain_env(monkeypatch):
    for k in ("NO_COLOR", "FORCE_COLOR", "TERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("COLUMNS", "120")    # terminal width for the Tty cases and argparse
    ui.configure()
    yield
    ui.configure()


# ---- words -------------------------------------------------------------------------------------
@pytest.mark.parametrize("items,expected", [
    (["g4dn.12xlarge", "g4dn.2xlarge", "g4dn.xlarge", "g4dn.metal", "g4dn.16xlarge"],
     ["g4dn.xlarge", "g4dn.2xlarge", "g4dn.12xlarge", "g4dn.16xlarge", "g4dn.metal"]),
    (["a2-highgpu-8g", "a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g"],
     ["a2-highgpu-1g", "a2-highgpu-2g", "a2-highgpu-4g", "a2-highgpu-8g"]),
    (["europe-west10", "europe-west4", "europe-west1", "us-east-1"],
     ["europe-west1", "europe-west4", "europe-west10", "us-east-1"]),
    (["p5.48xlarge", "p4d.24xlarge", "p5en.48xlarge", "p4de.24xlarge"],
     ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5en.48xlarge"]),
    (["2026.12.03.10", "2026.12.03.2", "2026.12.03"],
     ["2026.12.03", "2026.12.03.2", "2026.12.03.10"]),
])
def test_natural_sort(items, expected):
    assert ui.natural_sorted(items) == expected


def test_natural_sort_by_tuple_key():
    rows = [("aws", "us-east-1", "g6.12xlarge"), ("aws", "us-east-1", "g6.2xlarge"),
            ("aws", "eu-north-1", "g6.48xlarge")]
    assert ui.natural_sorted(rows, key=lambda r: r) == [rows[2], rows[1], rows[0]]


@pytest.mark.parametrize("n,word,expected", [
    (0, "node", "0 nodes"), (1, "node", "1 node"), (2, "node", "2 nodes"),
    (1, "policy", "1 policy"), (3, "policy", "3 policies"), (1204, "resource", "1,204 resources"),
    (1, "added or removed resource", "1 added or removed resource"),
])
def test_plural(n, word, expected):
    assert ui.plural(n, word) == expected


def test_no_module_writes_a_plural_rule_of_its_own():
    """One plural rule (gpulease/text.py, issue 25 item 7): no `'s' if n == 1` in messages."""
    own = re.compile(r"""\{\s*['"]s['"]\s+if\b|\(\s*['"]{2}\s+if\s+[^()]*==\s*1\s+else\s+['"]s['"]""")
    found = {str(path.relative_to(ROOT)): n for path in (ROOT / "gpulease").rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if own.search(line)}
    assert found == {}, found


@pytest.mark.parametrize("mix,expected", [
    ({"reserved": 1, "on_demand": 2, "spot": 5}, "1 reserved · 2 on-demand · 5 spot"),
    ({"reserved": 0, "on_demand": 0, "spot": 1}, "1 spot"),
    ({"reserved": 8, "on_demand": 0, "spot": 0}, "8 reserved"),
    ({"reserved": 0, "on_demand": 0, "spot": 0}, "none"),
    (argparse.Namespace(reserved=0, on_demand=3, spot=2), "3 on-demand · 2 spot"),
])
def test_purchase_mix(mix, expected):
    assert ui.purchase_mix(mix) == expected


@pytest.mark.parametrize("token,shown", [
    ("aws:autoscaling/group:Group", "aws:autoscaling:Group"),
    ("gcp:projects/iAMMember:IAMMember", "gcp:projects:IAMMember"),
    ("aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
     "aws:s3:BucketServerSideEncryptionConfiguration"),
    ("pulumi:providers:aws", "pulumi:providers:aws"),
    ("pulumi-python:dynamic/gpulease:GceReservation",
     "pulumi-python:dynamic/gpulease:GceReservation"),
    ("gpulease:aws:GpuCluster", "gpulease:aws:GpuCluster"),
])
def test_short_type_is_pulumis_display_name(token, shown):
    assert ui.short_type(token) == shown


# ---- colour policy -----------------------------------------------------------------------------
@pytest.mark.parametrize("env,tty,flag,colour", [
    ({}, False, False, False),                                  # piped: plain
    ({}, True, False, True),                                    # terminal: colour
    ({"NO_COLOR": "1"}, True, False, False),
    ({"NO_COLOR": ""}, True, False, True),                      # empty NO_COLOR is unset
    ({"FORCE_COLOR": "1"}, False, False, True),
    ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, False, False),  # NO_COLOR wins
    ({"TERM": "dumb"}, True, False, False),
    ({"FORCE_COLOR": "1"}, True, True, False),                  # --no-color wins
])
def test_color_policy(env, tty, flag, colour):
    ui.configure(no_color=flag)
    assert ui.color_enabled(Tty() if tty else io.StringIO(), env) is colour


def _table_text(stream) -> str:
    o = ui.Out(stream)
    o.print(o.table([ui.Col("type"), ui.Col("name"), ui.Col("$/month", right=True, style="bold")],
                    [["aws:s3:BucketServerSideEncryptionConfiguration", "x-encryption", "$0.00"],
                     ["aws:autoscaling:Group", "train-asg", ("$1,500.00", "bold")]], indent=2))
    return stream.getvalue()


def test_plain_table_snapshot_keeps_alignment_with_long_names():
    assert _table_text(io.StringIO()) == (
        "  type                                            name            $/month\n"
        "  ----------------------------------------------- ------------- ---------\n"
        "  aws:s3:BucketServerSideEncryptionConfiguration  x-encryption      $0.00\n"
        "  aws:autoscaling:Group                           train-asg     $1,500.00\n")


def test_force_color_adds_styles_and_no_color_removes_them(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    coloured = _table_text(io.StringIO())
    assert ANSI.search(coloured) and ANSI.sub("", coloured) == _plain()
    monkeypatch.setenv("NO_COLOR", "1")
    assert _table_text(io.StringIO()) == _plain()


def _plain() -> str:
    ui.configure(no_color=True)
    try:
        return _table_text(io.StringIO())
    finally:
        ui.configure()


def test_terminal_tables_never_cut_a_price(monkeypatch):
    """On a 40-column terminal the wide table is not squeezed into "$1,5…": the unwrappable
    columns keep their width (the terminal wraps the line instead)."""
    monkeypatch.setenv("COLUMNS", "40")
    out = ANSI.sub("", _table_text(Tty()))
    assert "aws:s3:BucketServerSideEncryptionConfiguration  x-encryption      $0.00" in out
    assert "$1,500.00" in out and "…" not in out
    o = ui.Out(Tty())     # prose wraps at the terminal's width
    o.print("word " * 20, indent=2)
    assert [len(x) for x in o.stream.getvalue().splitlines()] == [36, 36, 31]   # 7+7+6 words


def test_cli_no_color_flag_and_force_color(capsys, monkeypatch, tmp_path):
    cat = _small_catalog(tmp_path)
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert main(["catalog", "list", "--catalog", cat]) == 0
    assert ANSI.search(capsys.readouterr().out)
    assert main(["catalog", "list", "--catalog", cat, "--no-color"]) == 0
    assert not ANSI.search(capsys.readouterr().out)
    assert main(["--no-color", "catalog", "list", "--catalog", cat]) == 0
    assert not ANSI.search(capsys.readouterr().out)
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["catalog", "list", "--catalog", cat]) == 0
    assert not ANSI.search(capsys.readouterr().out)


def _small_catalog(tmp_path) -> str:
    from tests.test_refresh_gcp import _base_catalog

    path = tmp_path / "base.json"
    path.write_text(json.dumps(_base_catalog().raw))
    return str(path)


def test_catalog_list_snapshot_natural_order(tmp_path, capsys):
    cat = _small_catalog(tmp_path)
    assert main(["catalog", "list", "--catalog", cat, "--cloud", "gcp"]) == 0
    out = capsys.readouterr().out
    types = [line.split()[2] for line in out.splitlines()[3:]]
    assert types == ui.natural_sorted(types) and len(types) >= 2
    head = out.splitlines()[:2]
    assert head[0].startswith("catalog 2026.12.02 (prices as of ") and head[0].endswith(
        f"USD per node-hour · {ui.plural(len(types), 'offering')}")
    assert head[1].split() == ["cloud", "region", "instance", "gpu", "gpus", "gpu_gb", "vcpus",
                               "mem_gb", "net_gbps", "rdma", "on_demand", "$/gpu-h", "spot",
                               "commit_1y",
                               "commit_3y", "zones"]
    assert all(line == line.rstrip() for line in out.splitlines())


# ---- plan text ---------------------------------------------------------------------------------
def _plan_doc(**over) -> dict:
    res = [
        {"urn": "u1", "type": "aws:autoscaling/group:Group", "name": "train-asg",
         "cluster": "train", "purchase_model": "spot", "tags": {"a": "1", "b": "2"},
         "monthly_usd": 1234.5, "inputs": {"maxSize": 2}},
        {"urn": "u2", "type": "aws:iam/role:Role", "name": "train-role", "cluster": "train",
         "purchase_model": "none", "tags": {"a": "1"}, "monthly_usd": 0.0, "inputs": {}},
        {"urn": "u3", "type": "aws:iam/rolePolicy:RolePolicy", "name": "train-policy",
         "cluster": "train", "purchase_model": "none", "tags": {}, "monthly_usd": 0.0,
         "inputs": {}},
        {"urn": "u4", "type": "aws:s3/bucket:Bucket", "name": "data-bucket", "cluster": "shared",
         "purchase_model": "none", "tags": {"a": "1"}, "monthly_usd": 23.0, "inputs": {}},
    ]
    doc = {
        "stack": "t", "source": "stacks/Pulumi.t.yaml",
        "catalog": {"version": "2026.12.03", "as_of": "2026-12-03"},
        "clusters": [{
            "name": "train", "cloud": "aws", "region": "us-east-1", "zone": "use1-az4",
            "instance_type": "g6.12xlarge", "gpu": "L4", "gpus_per_node": 4, "nodes": 1,
            "purchase": {"reserved": 0, "on_demand": 0, "spot": 1}, "template": "spot-burst",
            "network": "none", "hourly_usd": 1.69, "monthly_usd": 1234.5,
            "rationale": "cheapest spot zone."}],
        "storage": [{"name": "data", "cloud": "aws", "region": "us-east-1", "size_tb": 1,
                     "monthly_usd": 23.0, "tiers": [
                         {"storage_class": "STANDARD", "from_day": 0, "to_day": None,
                          "share": 1.0, "usd_per_gb_month": 0.023, "monthly_usd": 23.0}]}],
        "resources": res,
        "totals": {"hourly_usd": 1.72, "monthly_usd": 1257.5,
                   "by_purchase_model": {"spot": 1234.5, "on_demand": 0.0},
                   "by_storage_tier": {"STANDARD": 23.0}},
        "budget": {"monthly_usd": 1500.0, "headroom_usd": 242.5, "over": False},
        "violations": [], "conformance": [], "warnings": [],
    }
    doc.update(over)
    return doc


def _render(plan: dict, **kw) -> str:
    buf = io.StringIO()
    render_plan(plan, ui.Out(buf), **kw)
    return buf.getvalue()


def test_plan_text_snapshot():
    assert _render(_plan_doc()) == """\
gpulease plan · stack t (stacks/Pulumi.t.yaml) · catalog 2026.12.03 (built 2026-12-03)

Clusters
  cluster  cloud  region     zone      instance     nodes          purchase  template    network  $/hour    $/month
  -------- ------ ---------- --------- ------------ -------------- --------- ----------- -------- ------- ---------
  train    aws    us-east-1  use1-az4  g6.12xlarge  1 node × 4 L4  1 spot    spot-burst  none      $1.69  $1,234.50

  train: cheapest spot zone.

Resources: 4 declared, 2 with a monthly cost, 2 free
  cluster  type                   name         purchase  tags    $/month
  -------- ---------------------- ------------ --------- ----- ---------
  train    aws:autoscaling:Group  train-asg    spot         2  $1,234.50
  shared   aws:s3:Bucket          data-bucket               1     $23.00
  + 2 free resources (1 Role, 1 RolePolicy); --all-resources lists them

Storage tiers
  storage  home           class     age     share  $/GB-month  $/month
  -------- -------------- --------- ------- ------ ----------- -------
  data     aws:us-east-1  STANDARD  day 0+   100%      $0.023   $23.00

Cost by purchase model: spot $1,234.50 · on-demand $0.00
Cost by storage tier: STANDARD $23.00
Total: $1,257.50/month estimated · $1.72/hour with every node up
Budget: $1,500.00/month · headroom $242.50 (83.8% used)

Guardrails: no violations
Conformance: every constrained input matches its API spec
"""


def test_plan_text_all_resources_and_findings():
    plan = _plan_doc(
        violations=[{"policy": "budget-cap", "level": "mandatory", "resource": "",
                     "message": "over budget"},
                    {"policy": "imdsv2", "level": "advisory", "resource": "train-lt",
                     "message": "tokens optional"}],
        conformance=[{"level": "error", "rule": "enum", "resource": "train-lt",
                      "physical_name": "train-lt-1a2b", "path": "instanceType",
                      "message": "not an EC2 type", "spec": "botocore ec2 InstanceType"}],
        budget={"monthly_usd": 1000.0, "headroom_usd": -257.5, "over": True})
    text = _render(plan, all_resources=True)
    assert "  train    aws:iam:Role           train-role   " in text
    assert "--all-resources lists them" not in text
    assert "Budget: $1,000.00/month · OVER BUDGET by $257.50 (125.8% used)" in text
    assert "  [mandatory] budget-cap: over budget\n" in text          # no ": :" for no resource
    assert "  [advisory] imdsv2: train-lt: tokens optional\n" in text
    assert "Conformance findings (1 error, 0 warnings)" in text
    assert "  [error] enum: train-lt (train-lt-1a2b): instanceType: not an EC2 type" in text


def test_show_inputs_lists_every_resource_with_its_inputs():
    text = _render(_plan_doc(), all_resources=True, show_inputs=True)
    assert text.count("inputs: ") == 4
    assert ("  train  aws:autoscaling:Group  train-asg  spot  2  $1,234.50\n"
            '      inputs: {"maxSize": 2}\n') in text


# ---- exit reasons ------------------------------------------------------------------------------
def _diff(old: float, new: float) -> dict:
    pct = None if old == 0 else round((new - old) / old * 100, 2)
    return {"old": {"stack": "staging"}, "new": {"stack": "prod"},
            "total": {"old_monthly_usd": old, "new_monthly_usd": new,
                      "delta_usd": round(new - old, 2), "pct": pct}}


def test_increase_reason_names_the_total_the_rise_and_the_threshold():
    assert increase_reason(_diff(1000.0, 1250.0), 10) == (
        "the total monthly cost rose +$250.00 from $1,000.00 (staging) to $1,250.00 (prod), "
        "+25.0%, which is 15.0 points over --fail-on-increase 10%")
    assert increase_reason(_diff(0.0, 5.0), 10).endswith(
        "a rise from nothing exceeds any --fail-on-increase 10%")


def test_blocking_reason_counts_by_guardrail_and_rule():
    plan = _plan_doc(violations=[{"policy": "budget-cap", "level": "mandatory"},
                                 {"policy": "ebs-encrypted", "level": "mandatory"},
                                 {"policy": "ebs-encrypted", "level": "mandatory"},
                                 {"policy": "budget-headroom", "level": "advisory"}],
                     conformance=[{"level": "error", "rule": "enum", "resource": "lt",
                                   "path": "instanceType"},
                                  {"level": "warning", "rule": "x", "resource": "y", "path": "z"}])
    assert blocking_reason(plan) == (
        "3 mandatory guardrail violations (ebs-encrypted ×2, budget-cap) and 1 conformance "
        "error (enum at lt.instanceType) block the deploy; fix them and plan again")


def test_exit_4_wins_and_both_reasons_are_printed(capsys):
    args = argparse.Namespace(fail_on_increase=10.0)
    plan = _plan_doc(violations=[{"policy": "budget-cap", "level": "mandatory"}])
    assert _exit(plan, _diff(100.0, 200.0), args) == EXIT_POLICY
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("exit 3 (cost over a gate threshold (--fail-on-increase, "
                             "gpulease:gate.block)): the total monthly")
    assert err[1].startswith("exit 4 (a mandatory guardrail failed or a conformance error was "
                             "found): 1 mandatory guardrail violation (budget-cap)")
    assert err[1].endswith("(exit 4 wins over exit 3)")
    assert _exit(_plan_doc(), _diff(100.0, 105.0), args) == EXIT_OK
    assert capsys.readouterr().err == ""


def test_explain_hint():
    ns = argparse.Namespace(stack="prod", config=None)
    two = _plan_doc(clusters=_plan_doc()["clusters"] * 2)
    assert explain_hint(ns, two) == "gpulease explain --stack prod [--cluster train]"
    ns = argparse.Namespace(stack=None, config="my dir/Pulumi.x.yaml")
    assert explain_hint(ns, _plan_doc()) == "gpulease explain --config 'my dir/Pulumi.x.yaml'"


def test_no_command_and_no_action_exit_2_with_a_reason(capsys):
    assert main([]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "error: say which command to run: plan, explain, catalog, render, reap" in err
    assert main(["catalog"]) == EXIT_BAD_INPUT
    assert "exit 2 (bad input, nothing was done): say which action: gpulease catalog " \
           "list|versions|refresh|import" in capsys.readouterr().err


def test_mistyped_command_suggests_the_right_one(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plna", "--stack", "dev"])
    assert e.value.code == 2
    assert '(did you mean "plan"?)' in capsys.readouterr().err


def test_a_command_that_forgets_its_reason_still_gets_one(capsys, monkeypatch):
    import gpulease.cli.render as render

    monkeypatch.setattr(render, "run", lambda args: EXIT_FAILED)
    assert main(["render", "--stack", "dev", "--cluster", "x", "--out", "o"]) == EXIT_FAILED
    assert capsys.readouterr().err == "exit 1 (failed at run time): see the output above\n"


# ---- progress ----------------------------------------------------------------------------------
def test_steps_when_piped_are_plain_lines_on_stderr(capsys):
    with ui.steps("planning dev") as s:
        s.step("deciding placement")
        s.note("wrote x.html")
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err == "planning dev: deciding placement\nwrote x.html\n"
    with ui.steps("planning dev", piped_lines=False) as s:   # --json: stderr stays quiet
        s.step("deciding placement")
        s.note("wrote x.html")
    assert capsys.readouterr() == ("", "")


def test_steps_on_a_terminal_are_a_spinner_that_is_erased(monkeypatch):
    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with ui.steps("planning dev", piped_lines=False) as s:    # a terminal shows it even for --json
        assert s.live
        s.step("running the Pulumi program under mocks")
        s._progress.refresh()
        s.note("wrote x.html")
    text = tty.getvalue()
    assert "planning dev: running the Pulumi program under mocks" in text
    assert "wrote x.html" in text
    assert "\x1b[2K" in text          # the spinner line is erased at the end (transient)


# ---- help --------------------------------------------------------------------------------------
HEAVY = ("pulumi", "pulumi_aws", "pulumi_gcp", "scipy", "numpy", "boto3", "botocore", "google",
         "jinja2", "yaml", "rich", "moto")


HELP_SCREENS = [[], *([name] for name in COMMANDS), *(["catalog", sub] for sub in (
    "list", "versions", "refresh", "import", "quotes"))]


@pytest.mark.parametrize("screen", HELP_SCREENS)
def test_help_imports_no_heavy_package(screen):
    probe = ("import json, sys\nfrom gpulease.cli import main\n"
             "try:\n    main(sys.argv[1:] + ['--help'])\nexcept SystemExit:\n    pass\n"
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", probe, *screen], cwd=ROOT, capture_output=True,
                       text=True, check=True)
    loaded = set(json.loads(p.stderr.strip().splitlines()[-1]))
    assert "usage: gpulease" in p.stdout
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
    assert "pydantic" not in loaded     # reap's defaults: plain constants (gpulease.reaper.defaults)


def test_reap_help_shows_the_reaper_settings_defaults():
    """`reap --help` reads its defaults from gpulease.reaper.defaults, the stack's gpulease:reaper
    settings model too: one value each."""
    from gpulease.cli import build_parser
    from gpulease.reaper.settings import ReaperSettings

    parser = build_parser(["reap"])
    args = parser.parse_args(["reap", "--all"])
    s = ReaperSettings()
    assert (args.threshold, args.grace_minutes, args.max_actions) == \
        (s.threshold_pct, s.grace_minutes, s.max_actions)
    text = _help(parser, "reap")
    assert f"(default {s.threshold_pct})" in text and f"(default {s.max_actions})" in text


def _help(parser: argparse.ArgumentParser, *path: str) -> str:
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser.format_help()


@pytest.mark.parametrize("path", [(name,) for name in COMMANDS] + [
    ("catalog", "list"), ("catalog", "refresh"), ("catalog", "import")])
def test_every_help_teaches_examples_and_exit_codes(path):
    text = _help(build_parser(full=True), *path)
    assert "exit codes" in text
    assert "--no-color" in text
    if len(path) == 1:
        assert "examples:" in text and f"gpulease {path[0]}" in text.split("examples:")[1]


def test_top_level_help_lists_every_command_without_importing_them():
    text = build_parser([]).format_help()
    for name, summary in COMMANDS.items():
        assert re.search(rf"^\s+{name}\s+{re.escape(summary[:30])}", text, re.M), name
    assert "every non-zero exit prints its reason on stderr" in text


# ---- docs/cli.md -------------------------------------------------------------------------------
def test_cli_reference_is_generated_from_the_parsers():
    from tools.cli_reference import render_markdown

    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert current == render_markdown(), (
        "docs/cli.md is stale: run `python -m tools.cli_reference > docs/cli.md`")


def _example_commands() -> list[list[str]]:
    import shlex

    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    found = []
    for line in text.splitlines():
        m = re.match(r"\s*(?:[A-Z_]+=\S+\s+)?(gpulease (?:plan|explain|catalog|render|reap)\b"
                     r"[^#|>]*)", line)
        if m and "[" not in m.group(1) and "COMMAND" not in m.group(1):
            command = re.split(r"\s{2,}", m.group(1).strip())[0]   # drop the description
            found.append(shlex.split(command.rstrip(")`")))
    return found


def test_every_documented_example_parses():
    """Each `gpulease ...` line of docs/cli.md (the examples of every --help included) names
    real commands and flags with valid values: a renamed flag cannot leave a dead example."""
    examples = _example_commands()
    assert len(examples) > 25
    for argv in examples:
        args = build_parser(argv[1:]).parse_args(argv[1:])
        assert getattr(args, "func", None), argv
