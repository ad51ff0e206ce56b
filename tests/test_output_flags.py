"""Output flags follow one convention across commands (issue 25 item 4, contract C5):
`--format table|json[|html]`, `--out FILE`, `--json` kept as the alias; JSON is strict JSON;
`plan --diff` prints the diff, the whole plan one flag away."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from gpulease.cli import main
from tests.timeouts import HANG_S

ROOT = Path(__file__).resolve().parents[1]
SKYPILOT = ROOT / "tests" / "fixtures" / "skypilot" / "good"


@pytest.fixture(autouse=True)
def in_project(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GPULEASE_QUOTES_CACHE", str(tmp_path / "no-quotes-cache.json"))


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def strict(text: str):
    """The JSON parser every other language has: NaN / Infinity are not JSON."""
    def refuse(name):
        raise AssertionError(f"{name} in a JSON document")
    return json.loads(text, parse_constant=refuse)


#: every command that prints a report, offline (reap: test_reap_json_is_strict below).
COMMANDS = [
    ["plan", "--stack", "dev"],
    ["plan", "--stack", "dev", "--diff", "staging", "--fail-on-increase", "5"],
    ["explain", "--stack", "staging"],
    ["catalog", "list", "--gpu", "L4"],
    ["catalog", "versions"],
    ["catalog", "quotes", "--source", "offline", "--gpu", "H100"],
]
# recommend: tests/test_recommend_cli.py parses its --json strictly too (it needs the fakes)


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_format_json_is_the_json_alias_and_strict(argv, tmp_path):
    code, out, err = run([*argv, "--format", "json"])
    assert code in (0, 3), err
    doc = strict(out)
    code2, out2, _ = run([*argv, "--json"])
    assert code2 == code
    if argv[:2] in (["catalog", "list"], ["catalog", "versions"]):   # no clock in them
        assert strict(out2) == doc
    # --out FILE: the same document in the file, nothing on stdout, `wrote FILE` on stderr
    target = tmp_path / "sub" / "report.json"
    code3, out3, err3 = run([*argv, "--format", "json", "--out", str(target)])
    assert code3 == code and out3 == "" and f"wrote {target}" in err3
    saved = strict(target.read_text())
    assert type(saved) is type(doc) and (not isinstance(doc, dict) or saved.keys() == doc.keys())


def test_render_and_catalog_import_keep_their_out_and_take_format(tmp_path):
    code, out, err = run(["render", "--stack", "dev", "--cluster", "sandbox", "--out",
                          str(tmp_path / "boot"), "--format", "json"])
    assert code == 0, err
    assert strict(out)["cluster"] == "sandbox" and (tmp_path / "boot").is_dir()
    code, out, err = run(["catalog", "import", "skypilot", str(SKYPILOT), "--out",
                          str(tmp_path / "cats"), "--format", "json"])
    assert code == 0, err
    assert Path(strict(out)["path"]).is_file()


def test_reap_json_is_strict(moto_url, monkeypatch, tmp_path):
    import requests

    requests.post(f"{moto_url}/moto-api/reset", timeout=HANG_S)
    for k, v in {"AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                 "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-west-2"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    code, out, err = run(["reap", "--all", "--format", "json", "--audit-log",
                          str(tmp_path / "a.jsonl")])
    assert code == 0, err
    assert strict(out)["clusters"] == []


def test_bad_format_gets_a_suggestion(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--stack", "dev", "--format", "jsn"])
    assert exc.value.code == 2
    assert "invalid choice: 'jsn'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["catalog", "versions", "--format", "yaml"])
    assert "choose from 'table', 'json'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["explain", "--stack", "dev", "--formt", "json"])
    assert 'unrecognized arguments: --formt json (did you mean "--format"?)' in \
        capsys.readouterr().err
    assert run(["catalog", "versions", "--format", "JSON"])[0] == 0   # case does not matter


def test_json_and_format_table_contradict():
    code, out, err = run(["catalog", "versions", "--json", "--format", "table"])
    assert code == 2 and out == ""
    assert "--json: --json means --format json, which contradicts --format table" in err


def test_out_is_not_written_on_bad_input(tmp_path):
    target = tmp_path / "plan.txt"
    code, out, err = run(["plan", "--stack", "nope", "--out", str(target)])
    assert code == 2 and not target.exists() and list(tmp_path.iterdir()) == []
    code, _, err = run(["catalog", "versions", "--out", str(tmp_path)])
    assert code == 2 and "is a directory: give a file name" in err


def test_plan_format_html_is_the_report(tmp_path):
    target = tmp_path / "r.html"
    code, out, err = run(["plan", "--stack", "dev", "--format", "html", "--out", str(target)])
    assert code == 0 and out == "", err
    html = target.read_text()
    assert html.startswith("<!DOCTYPE html>") and "sandbox" in html


def test_plan_diff_prints_the_diff_and_the_plan_one_flag_away(tmp_path):
    code, text, err = run(["plan", "--stack", "staging", "--diff", "dev",
                           "--fail-on-increase", "10"])
    assert code == 3
    assert "Clusters" not in text and "Resources:" not in text        # no plan tables
    lines = text.splitlines()
    assert lines[0].startswith("Monthly cost diff: dev (catalog ")
    assert any(x.startswith("  cluster ") and "before" in x and "after" in x and "change" in x
               for x in lines)                                          # per cluster
    assert any(x.startswith("Plan of staging: $") and "guardrails: no violations" in x
               for x in lines)
    reason = err.strip().splitlines()[-1].split("): ", 1)[1]           # what exit 3 says
    assert f"Cost gate (--fail-on-increase 10%): FAILED, exit 3 — {reason}" in text
    assert lines[-1] == "why: gpulease explain --stack staging"
    code, full, _ = run(["plan", "--stack", "staging", "--diff", "dev", "--show-plan"])
    assert code == 0
    assert full.index("Clusters") < full.index("Monthly cost diff") and "Cost gate" not in full
    code, out, _ = run(["plan", "--stack", "staging", "--diff", "dev", "--fail-on-increase",
                        "10", "--json"])
    gate = strict(out)["diff"]["gate"]
    assert gate == {"fail_on_increase": 10.0, "exceeded": True, "reason": reason}


def test_show_plan_needs_diff():
    code, _, err = run(["plan", "--stack", "dev", "--show-plan"])
    assert code == 2 and "--show-plan: needs --diff" in err
