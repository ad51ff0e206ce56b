"""Errors that say what to do (issue 25 item 6): missing credentials on both clouds for every
command that calls a cloud (exit 2, what to set, nothing called or written), YAML syntax errors
located as FILE:LINE:COLUMN with the key and a tab hint, and no third-party warnings on the
terminal."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from gpulease import credentials
from gpulease.cli import main, quiet_third_party_warnings
from tests.conftest import DEAD
from tests.test_recommend_cli import STACK
from tests.timeouts import HANG_S

ROOT = Path(__file__).resolve().parents[1]
@pytest.fixture
def aws_keys(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


AWS_FIX = ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
GCP_FIX = ("gcloud auth application-default login", "GOOGLE_APPLICATION_CREDENTIALS")


def _stack(tmp_path: Path, clouds: tuple[str, ...]) -> Path:
    values = json.loads(json.dumps(STACK))
    values["gpulease:clusters"] = [c for c in values["gpulease:clusters"]
                                   if ("aws" if c["regions"] == ["us-east-1"] else "gcp") in clouds]
    for c in ("aws", "gcp"):
        if c not in clouds:
            del values["gpulease:clouds"][c]
    p = tmp_path / "Pulumi.prod.yaml"
    p.write_text(yaml.safe_dump({"config": values}, sort_keys=False))
    return p


def _commands(cloud: str, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that calls ``cloud``, as a user runs it."""
    audit = str(tmp_path / "audit.jsonl")
    return {
        "reap": ["reap", "--all", "--cloud", cloud, "--audit-log", audit]
        + (["--project", "acme-ml-prod"] if cloud == "gcp" else []),
        "recommend": ["recommend", "--config", str(_stack(tmp_path, (cloud,)))],
        "catalog refresh": ["catalog", "refresh", "--cloud", cloud, "--out",
                            str(tmp_path / "new.json")],
        "catalog quotes --source live": ["catalog", "quotes", "--source", "live", "--cloud",
                                         cloud, "--gpu", "H100", "--no-cache"],
    }


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
@pytest.mark.parametrize("command", ["reap", "recommend", "catalog refresh",
                                     "catalog quotes --source live"])
def test_missing_credentials_are_exit_2_with_what_to_set(cloud, command, no_aws, no_gcp,
                                                         tmp_path, capsys):
    code = main(_commands(cloud, tmp_path)[command])
    err = capsys.readouterr().err
    name = "no AWS credentials found" if cloud == "aws" else "no Google Cloud credentials found"
    assert code == 2, err
    assert f"gpulease {command}: {name}" in err
    assert all(fix in err for fix in (AWS_FIX if cloud == "aws" else GCP_FIX)), err
    assert "Traceback" not in err and "Warning" not in err
    # nothing was written: no audit record of a run that never started, no catalog file
    assert not (tmp_path / "audit.jsonl").exists() and not (tmp_path / "new.json").exists()


def test_with_one_cloud_missing_the_other_is_offered(no_aws, no_gcp, aws_keys, tmp_path, capsys):
    code = main(["reap", "--all", "--project", "acme-ml-prod",
                 "--audit-log", str(tmp_path / "a.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "no Google Cloud credentials found" in err
    assert "no AWS credentials" not in err
    assert "or pass --cloud aws to run on AWS only" in err


def test_an_unreadable_key_file_is_named(no_aws, no_gcp, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    code = main(["recommend", "--config", str(_stack(tmp_path, ("gcp",)))])
    err = capsys.readouterr().err
    assert code == 2 and "no usable Google Cloud credentials" in err and "key.json" in err


def test_quotes_without_credentials_fall_back_to_the_shipped_data_by_default(no_aws, no_gcp,
                                                                              capsys):
    """--source auto (the default) is offline when a cloud has no credentials: not an error."""
    assert main(["catalog", "quotes", "--gpu", "H100", "--format", "json", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["live_clouds"] == [] and sorted(doc["offline_clouds"]) == ["aws", "gcp"]
    assert doc["api_calls"] == 0 and doc["quotes"]   # the shipped published rates


def test_credentials_found_by_the_sdk_pass(no_aws, no_gcp, aws_keys, monkeypatch):
    assert credentials.missing("aws") is None
    assert credentials.missing("gcp") == "no Google Cloud credentials found"
    monkeypatch.setenv("GPULEASE_GCP_ENDPOINT", DEAD)   # an emulator needs none
    assert credentials.missing("gcp") is None


def test_an_sdk_credentials_error_after_the_check_is_exit_2(no_aws, monkeypatch, tmp_path, capsys):
    """The last resort: a NoCredentialsError that escapes a command (credentials that vanished
    between the check and a call) is the same exit 2 and message, not a crash report."""
    from botocore.exceptions import NoCredentialsError

    from gpulease.cli import render

    def raising(args):
        try:
            raise NoCredentialsError()
        except NoCredentialsError as exc:
            raise RuntimeError("wrapped by a library") from exc

    monkeypatch.setattr(render, "run", raising)
    monkeypatch.setenv("GPULEASE_CRASH_DIR", str(tmp_path))
    code = main(["render", "--stack", "dev", "--cluster", "sandbox", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "gpulease render: no AWS credentials found" in err, err
    assert not list(tmp_path.glob("*crash*")) and "internal error" not in err


def test_from_exception_leaves_other_errors_alone():
    assert credentials.from_exception(ValueError("x"), command="reap") is None


# ---- YAML syntax errors ------------------------------------------------------------------------
DEV = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text(encoding="utf-8")


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if needle in line)


@pytest.mark.parametrize("old,new,key,col,tab", [
    # a tab indenting a cluster's key
    ("      gpu: L4\n", "\t  gpu: L4\n", "gpulease:clusters[0].gpu", 1, True),
    # a tab before a top-level key
    ("  gpulease:owner: ml-platform\n", "\tgpulease:owner: ml-platform\n", "gpulease:owner", 1,
     True),
    # an unclosed flow list: the position is where the parser gave up
    ("regions: [us-central1, us-east4]", "regions: [us-central1, us-east4", None, None, False),
    # a second colon in a value
    ("      size_tb: 2\n", "      size_tb: 2: 3\n", "gpulease:storage[0].size_tb", 17, False),
])
def test_yaml_syntax_errors_are_located(old, new, key, col, tab, tmp_path, capsys):
    assert old in DEV
    text = DEV.replace(old, new, 1)
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.dev.yaml").write_text(text)
    code = main(["plan", "--config", str(tmp_path / "stacks" / "Pulumi.dev.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    error = err[err.index("error: "):]
    assert str(tmp_path) not in error   # the path as the user sees it in the project
    line = _line_of(text, new.strip().split("\n")[0])
    if key is None:   # the unclosed list: the next line's key is where YAML notices
        assert "stacks/Pulumi.dev.yaml:" in error and "gpulease:clouds.gcp.regions" in error
        assert "did not find expected ',' or ']'" in error
    else:
        assert f"stacks/Pulumi.dev.yaml:{line}:{col}: {key}: not valid YAML" in error, error
    assert ("indents with spaces only" in error) == tab
    if tab:
        assert f"line {line} is indented with a tab (column 1)" in error


# ---- schema findings carry the file's line:column (PyYAML's node marks) -----------------------
PROD = (ROOT / "stacks" / "Pulumi.prod.yaml").read_text(encoding="utf-8")
_EVAL_BATCH = "      gpu: L4\n      gpus: 8\n      hours_per_month: 300\n"


@pytest.mark.parametrize("old,new,needle,at,finding", [
    # a top-level scalar: the value's column
    ("  gpulease:budget_monthly_usd: 385000\n", "  gpulease:budget_monthly_usd: -5\n",
     "budget_monthly_usd", "-5", "gpulease:budget_monthly_usd: must be >= 0 (got -5)"),
    # the third cluster's gpus (a list item's key)
    (_EVAL_BATCH, _EVAL_BATCH.replace("gpus: 8", "gpus: 0"), "gpus: 0", "0",
     "gpulease:clusters[2].gpus: must be > 0 (got 0)"),
    # inside a flow mapping inside a list inside a list item: clusters[0].demand[1].gpus
    ("{gpus: 64, hours_per_month: 200}", "{gpus: -64, hours_per_month: 200}", "gpus: -64",
     "-64", "gpulease:clusters[0].demand[1].gpus:"),
    # an unknown key: the key's column, with the did-you-mean
    ("      idle_minutes: 30\n  gpulease:reaper:", "      idle_mintues: 30\n  gpulease:reaper:",
     "idle_mintues", "idle_mintues",
     'gpulease:clusters[4].idle_mintues: unknown key (did you mean "idle_minutes"?)'),
    # a nested mapping's value
    ("    grace_minutes: 30\n", "    grace_minutes: soon\n", "grace_minutes", "soon",
     "gpulease:reaper.grace_minutes: must be a whole number (got 'soon')"),
    # a missing key: the list item that lacks it
    (_EVAL_BATCH, "      gpus: 8\n      hours_per_month: 300\n", "- name: eval-batch",
     "name: eval-batch", "gpulease:clusters[2].gpu: required key is missing"),
])
def test_schema_findings_are_located(old, new, needle, at, finding, tmp_path, capsys):
    """Every finding of the loader on a stack file names FILE:LINE:COLUMN of the key or value
    its config path names (the item that lacks a missing key)."""
    assert PROD.count(old) == 1, old
    text = PROD.replace(old, new, 1)
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "Pulumi.prod.yaml").write_text(text)
    code = main(["plan", "--config", str(tmp_path / "stacks" / "Pulumi.prod.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    line = _line_of(text, needle)
    col = text.split("\n")[line - 1].index(at) + 1
    assert f"stacks/Pulumi.prod.yaml:{line}:{col}: {finding}" in err, err


def test_every_loader_finding_is_located_and_warnings_too(tmp_path):
    """No finding of a bad stack file is left without a position; a warning gets one too."""
    from gpulease.config import locate
    from gpulease.errors import ConfigError, Finding

    text = PROD.replace("  gpulease:owner:", "  gpulease:ownr:", 1).replace(
        "      gpus: 16\n", "      gpus: 16.5\n      colour: blue\n", 1).replace(
        "      size_tb: 20\n", "      size_tb: [20]\n", 1)
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (tmp_path / "stacks").mkdir()
    path = tmp_path / "stacks" / "Pulumi.prod.yaml"
    path.write_text(text)
    from gpulease.cli.common import load_stack
    import argparse

    with pytest.raises(ConfigError) as exc:
        load_stack(argparse.Namespace(config=str(path), stack=None))
    findings = exc.value.findings
    assert len(findings) >= 5, exc.value
    assert all(re.fullmatch(r"stacks/Pulumi\.prod\.yaml:\d+:\d+", f.source)
               for f in findings), exc.value
    # a path the file does not hold points at its enclosing key; other sources are untouched
    w = Finding("gpulease:clusters[3].regions", "a warning", level="warning",
                source="stacks/Pulumi.prod.yaml")
    other = Finding("--catalog", "elsewhere", source="catalog.json")
    got = locate([w, other], "stacks/Pulumi.prod.yaml", PROD)
    assert got[0].source == f"stacks/Pulumi.prod.yaml:{_line_of(PROD, '- name: research')}:7"
    assert got[0].level == "warning" and got[1] == other


def test_a_tab_inside_a_value_is_not_blamed_on_indentation(tmp_path):
    """A tab that is not indentation (inside a quoted value) is valid YAML: no finding at all."""
    from gpulease.config import read_stack_file

    p = tmp_path / "Pulumi.dev.yaml"
    p.write_text(DEV.replace("ml-platform", '"ml\tplatform"', 1))
    assert read_stack_file(p)["gpulease:owner"] == "ml\tplatform"


# ---- third-party warnings ----------------------------------------------------------------------
def test_third_party_warnings_are_dropped_and_gpuleases_own_kept():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_third_party_warnings()
        for module in ("google.api_core._python_version_support", "botocore.client", "infra2",
                       "gpulease.cli.plan", "gpulease"):
            warnings.warn_explicit(f"from {module}", FutureWarning, "x.py", 1, module=module)
    assert [str(w.message) for w in seen] == ["from gpulease.cli.plan", "from gpulease"]


def _run(*flags: str, env: dict, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, "-m", "gpulease.cli", "catalog", "refresh",
                           "--cloud", "gcp", "--region", "us-central1", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)


def test_no_third_party_warning_reaches_the_terminal(tmp_path):
    """`catalog refresh --cloud gcp` imports google-cloud-billing and -compute, whose
    google.api_core warns (FutureWarning) at import on Python < 3.12: the command's stderr
    carries only its own report (here: the emulator address answers nothing, exit 1). With -W
    the user's filters win and the warning shows: the control that it would have been there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "PYTHONWARN"))}
    env.update(HOME=str(tmp_path), NO_GCE_CHECK="True", GPULEASE_GCP_ENDPOINT=DEAD)
    quiet = _run(env=env, out=tmp_path / "a.json")
    assert quiet.returncode == 1 and "nothing could be refreshed" in quiet.stderr, quiet.stderr
    assert "Warning" not in quiet.stderr, quiet.stderr
    if sys.version_info < (3, 12):   # google.api_core warns about 3.11's end of life
        loud = _run("-W", "default", env=env, out=tmp_path / "b.json")
        assert loud.returncode == 1 and "FutureWarning" in loud.stderr, loud.stderr
