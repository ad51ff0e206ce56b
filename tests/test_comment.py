"""Pull-request comments (issue 36 item 2): the markdown a plan becomes, and `gpulease comment
github|gitlab` against a local fake of the forges' REST endpoints (tests/fakes/forges.py)."""
from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from gpulease.errors import CloudError
from gpulease.pipeline import comments, markdown
from gpulease.retry import Backoff
from tests.fakes.forges import FakeForges
from tests.timeouts import HANG_S

PLAN = {
    "stack": "prod", "catalog": {"version": "2026.12.03.2", "as_of": "2026-12-03"},
    "totals": {"monthly_usd": 1500.0}, "budget": {"monthly_usd": 2000.0, "headroom_usd": 500.0,
                                                  "over": False},
    "clusters": [{"name": "train", "cloud": "aws", "region": "us-east-1",
                  "instance_type": "p5.48xlarge", "nodes": 2,
                  "purchase": {"reserved": 0, "on_demand": 1, "spot": 1}, "monthly_usd": 1500.0}],
    "violations": [],
    "diff": {"old": {"stack": "prod"}, "total": {"old_monthly_usd": 1000.0,
                                                 "new_monthly_usd": 1500.0, "delta_usd": 500.0,
                                                 "pct": 50.0},
             "clusters": [{"cluster": "train|x", "old_monthly_usd": 1000.0,
                           "new_monthly_usd": 1500.0, "delta_usd": 500.0, "pct": 50.0}]},
    "against": {"resources": [{"action": "replace", "name": "train-block",
                               "type": "aws:ec2/capacityReservation:CapacityReservation",
                               "cluster": "train"},
                              {"action": "update", "name": "x", "type": "t"}]},
}


def with_delta(d: float) -> dict:
    p = copy.deepcopy(PLAN)
    p["diff"]["total"].update(delta_usd=d, new_monthly_usd=1000.0 + d)
    return p


@pytest.fixture
def fake():
    f = FakeForges()
    url = f.start()
    f.url = url
    yield f
    f.stop()


def gh(fake, n=7):
    return comments.GitHub("acme/infra", n, fake.token, api=fake.url,
                           backoff=Backoff(sleep=lambda _s: None))


# ---- markdown ------------------------------------------------------------------------------
def test_delta_first_then_collapsed_clusters_budget_guardrails_replacements():
    body = markdown.render(PLAN)
    lines = body.splitlines()
    assert lines[0] == "<!-- gpulease-comment stack=prod -->"
    assert lines[3].startswith("**Monthly cost rises: +$500.00 (+50.0 %)**")
    order = [body.index(s) for s in ("Monthly cost rises", "<details><summary>Per cluster",
                                     "Budget: $2,000.00", "Guardrails: no violations",
                                     "would replace or delete 1 resource")]
    assert order == sorted(order)
    assert "| train\\|x |" in body                # a pipe in a name does not break the table
    assert "train-block" in body and "| x |" not in body   # updates are not listed


def test_no_baseline_says_how_to_get_one_and_a_huge_plan_is_truncated():
    p = copy.deepcopy(PLAN)
    del p["diff"]
    p["clusters"] = p["clusters"] * 3000
    body = markdown.render(p)
    assert "no baseline" in body and markdown.delta(p) is None
    assert len(body) <= markdown.MAX_BODY_CHARS and "truncated" in body


# ---- behaviours against the GitHub fake ------------------------------------------------------
def test_update_creates_once_then_edits_in_place(fake):
    notes = fake.pull_request("acme/infra", 7, ["LGTM", "<!-- gpulease-comment stack=dev -->x"])
    out = comments.post(gh(fake), markdown.render(PLAN), stack="prod")
    assert out.action == "created" and len(notes) == 3
    out2 = comments.post(gh(fake), markdown.render(with_delta(-100)), stack="prod")
    assert out2.action == "updated" and out2.id == out.id and len(notes) == 3
    assert "falls: -$100.00" in notes[-1].body
    assert comments.post(gh(fake), markdown.render(with_delta(-100)),
                         stack="prod").action == "nothing"
    # other people's comments and another stack's comment are untouched
    assert notes[0].body == "LGTM" and notes[1].body.endswith("x")


def test_hide_and_new_minimizes_earlier_ones(fake):
    notes = fake.pull_request("acme/infra", 7)
    first = comments.post(gh(fake), markdown.render(PLAN), stack="prod")
    out = comments.post(gh(fake), markdown.render(PLAN), stack="prod", behavior="hide-and-new")
    assert out.hidden == [first.id] and len(notes) == 2
    assert notes[0].minimized and not notes[1].minimized


def test_delete_and_new_and_new(fake):
    notes = fake.pull_request("acme/infra", 7)
    comments.post(gh(fake), markdown.render(PLAN), stack="prod", behavior="new")
    comments.post(gh(fake), markdown.render(PLAN), stack="prod", behavior="new")
    assert len(notes) == 2
    out = comments.post(gh(fake), markdown.render(PLAN), stack="prod",
                        behavior="delete-and-new")
    assert len(out.deleted) == 2 and [n.id for n in notes] == [int(out.id)]


@pytest.mark.parametrize("delta,flags,action", [
    (0.0, {"skip_no_diff": True}, "skipped"),
    (-5.0, {"only_if_increase": True}, "skipped"),
    (5.0, {"only_if_increase": True}, "created"),
    (-5.0, {"skip_no_diff": True}, "created"),
    (None, {"only_if_increase": True}, "skipped"),
])
def test_quiet_flags(fake, delta, flags, action):
    notes = fake.pull_request("acme/infra", 7)
    out = comments.post(gh(fake), "<!-- gpulease-comment stack=prod -->b", stack="prod",
                        delta_usd=delta, **flags)
    assert out.action == action and len(notes) == (action == "created")
    if action == "skipped":
        assert not [m for m, *_ in fake.log if m == "POST"]


def test_a_quiet_run_still_updates_a_stale_comment(fake):
    notes = fake.pull_request("acme/infra", 7, ["<!-- gpulease-comment stack=prod -->rises $500"])
    out = comments.post(gh(fake), "<!-- gpulease-comment stack=prod -->falls", stack="prod",
                        delta_usd=-5.0, only_if_increase=True)
    assert out.action == "updated" and notes[0].body.endswith("falls")


def test_pages_are_followed(fake):
    bodies = [f"comment {i}" for i in range(250)] + ["<!-- gpulease-comment stack=prod -->old"]
    notes = fake.pull_request("acme/infra", 7, bodies)
    out = comments.post(gh(fake), markdown.render(PLAN), stack="prod")
    assert out.action == "updated" and len(notes) == 251
    gets = [p for m, p, _ in fake.log if m == "GET"]
    assert len(gets) == 3 and "per_page=100" in gets[0]


def test_errors_retry_5xx_and_report_4xx_without_the_token(fake):
    notes = fake.pull_request("acme/infra", 7)
    fake.faults = [502, 503]
    comments.post(gh(fake), markdown.render(PLAN), stack="prod")
    assert len(notes) == 1
    with pytest.raises(CloudError) as exc:
        comments.post(gh(fake, n=99), markdown.render(PLAN), stack="prod")
    assert exc.value.status == 404 and fake.token not in str(exc.value)
    bad = comments.GitHub("acme/infra", 7, "wrong", api=fake.url)
    with pytest.raises(CloudError) as exc:
        comments.post(bad, markdown.render(PLAN), stack="prod")
    assert exc.value.status == 401 and "Bad credentials" in str(exc.value)


# ---- GitLab ---------------------------------------------------------------------------------
def test_gitlab_sticky_note_by_path_with_system_notes_ignored(fake):
    notes = fake.merge_request("acme/infra", 3, ["hi"],
                               system=["<!-- gpulease-comment stack=prod --> (system copy)"])
    lab = comments.GitLab("acme/infra", 3, fake.token, api=fake.url + "/api/v4")
    out = comments.post(lab, markdown.render(PLAN), stack="prod")
    assert out.action == "created" and len(notes) == 3
    out2 = comments.post(lab, markdown.render(with_delta(1)), stack="prod")
    assert out2.action == "updated" and out2.id == out.id and len(notes) == 3
    assert "%2F" in [p for m, p, _ in fake.log if m == "POST"][0]   # the path, URL-encoded
    with pytest.raises(ValueError, match="cannot hide"):
        comments.post(lab, "x", stack="prod", behavior="hide-and-new")


# ---- the command ---------------------------------------------------------------------------
def _cli(args, env, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    return subprocess.run([sys.executable, "-m", "gpulease", "comment", *args,
                           "--plan", str(plan)], env=env, capture_output=True, text=True,
                          timeout=HANG_S)


def test_cli_posts_with_the_token_from_the_environment(fake, tmp_path, monkeypatch):
    notes = fake.pull_request("acme/infra", 7)
    env = {"PATH": "/usr/bin:/bin", "GITHUB_TOKEN": fake.token, "GITHUB_API_URL": fake.url,
           "GITHUB_REPOSITORY": "acme/infra"}
    r = _cli(["github", "--pull-request", "7", "--json"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["action"] == "created" and len(notes) == 1
    assert fake.token not in r.stdout + r.stderr


def test_cli_without_a_token_exits_2_before_any_call(fake, tmp_path):
    fake.pull_request("acme/infra", 7)
    env = {"PATH": "/usr/bin:/bin", "GITHUB_API_URL": fake.url}
    r = _cli(["github", "--repo", "acme/infra", "--pull-request", "7"], env, tmp_path)
    assert r.returncode == 2 and "GITHUB_TOKEN" in r.stderr and "Traceback" not in r.stderr
    assert fake.log == []


def test_cli_dry_run_prints_the_comment_and_gitlab_refuses_hide(fake, tmp_path):
    r = _cli(["github", "--repo", "acme/infra", "--pull-request", "7", "--dry-run"],
             {"PATH": "/usr/bin:/bin"}, tmp_path)
    assert r.returncode == 0 and r.stdout.startswith("<!-- gpulease-comment stack=prod -->")
    r = _cli(["gitlab", "--project", "1", "--merge-request", "2", "--behavior", "hide-and-new"],
             {"PATH": "/usr/bin:/bin", "GITLAB_TOKEN": "x"}, tmp_path)
    assert r.returncode == 2 and "cannot hide" in r.stderr and fake.log == []


# ---- the GitHub composite action and the GitLab template, run against the fake --------------
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci" / "gpulease-comment.sh"


def _script(env: dict, tmp_path) -> subprocess.CompletedProcess:
    bindir = str(Path(sys.executable).parent)
    full = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path),
            "GPULEASE_PLAN_OUT": str(tmp_path / "plan.json"), **env}
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=HANG_S)


def test_the_action_runs_the_script_with_the_variables_it_reads():
    action = yaml.safe_load((ROOT / ".github/actions/gpulease-comment/action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    (step,) = action["runs"]["steps"]
    assert step["run"].endswith("/ci/gpulease-comment.sh") and step["shell"] == "bash"
    script = SCRIPT.read_text()
    for var in step["env"]:
        if var.startswith("GPULEASE_"):
            assert var in script, var
    lab = yaml.safe_load((ROOT / "ci/gitlab/gpulease.gitlab-ci.yml").read_text())
    assert "ci/gpulease-comment.sh" in lab["gpulease-comment"]["script"]


def test_the_script_plans_comments_and_then_updates_in_place(fake, tmp_path):
    from tests.tools import require_tool

    require_tool("shellcheck")
    assert subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True).returncode == 0
    notes = fake.pull_request("acme/infra", 5)
    env = {"GPULEASE_STACK": "dev", "GPULEASE_FORGE": "github", "GPULEASE_PULL_REQUEST": "5",
           "GITHUB_TOKEN": fake.token, "GITHUB_API_URL": fake.url,
           "GITHUB_REPOSITORY": "acme/infra"}
    r = _script(env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(notes) == 1 and "stack `dev`" in notes[0].body and "no baseline" in notes[0].body
    base = tmp_path / "base.json"
    base.write_text((tmp_path / "plan.json").read_text())
    r = _script({**env, "GPULEASE_BASE_PLAN": str(base), "GPULEASE_SKIP_NO_DIFF": "true"},
                tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(notes) == 1 and "does not change: +$0.00" in notes[0].body
    assert fake.token not in r.stdout + r.stderr
