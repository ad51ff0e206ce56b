"""`gpulease comment github|gitlab`: post a plan as a pull-request comment (issue 36 item 2)."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import print_json
from gpulease.errors import ConfigError, CredentialsError, Finding

DESCRIPTION = """\
Post a plan as a pull-request (GitHub) or merge-request (GitLab) comment: the monthly cost
change first, then the per-cluster breakdown (collapsed), the budget, the guardrails and what
`pulumi up` would replace or delete. PLAN is the JSON `gpulease plan --json` wrote; run the
plan with `--diff BASE` (the base branch's plan) for the change and `--against STATE` (a
`pulumi stack export`) for replacements. One comment per stack, found by a hidden marker.

Behaviours: update (default; one comment, edited in place), hide-and-new (GitHub: earlier
ones minimized as outdated), delete-and-new, new. --skip-no-diff posts nothing when the cost
does not change, --only-if-increase nothing unless it rises (an existing comment is still
updated so it never stays stale). The token comes from the environment only (GITHUB_TOKEN /
GITLAB_TOKEN) and is never printed. --dry-run prints the comment and calls nothing."""

EPILOG = """\
examples:
  gpulease plan --stack prod --diff base-plan.json --json --out plan.json
  gpulease comment github --plan plan.json --repo acme/infra --pull-request 42
  gpulease comment gitlab --plan plan.json --project 1234 --merge-request 7 --only-if-increase
  gpulease comment github --plan plan.json --pull-request 42 --dry-run

In CI the defaults come from the runner: GITHUB_REPOSITORY and GITHUB_API_URL (GitHub
Actions); CI_PROJECT_ID, CI_MERGE_REQUEST_IID and CI_API_V4_URL (GitLab CI).

exit codes: 0 posted, updated or skipped as asked · 1 the forge's API failed (after retries) ·
            2 bad input or no token (nothing called)"""

TOKENS = {"github": "GITHUB_TOKEN", "gitlab": "GITLAB_TOKEN"}


def register(sub: argparse._SubParsersAction) -> None:
    from gpulease.pipeline.comments import BEHAVIORS

    p = sub.add_parser("comment", help=COMMANDS["comment"], description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    forges = p.add_subparsers(dest="forge", metavar="github|gitlab", required=True)
    env = os.environ
    for name in ("github", "gitlab"):
        f = forges.add_parser(name, help=f"comment on a {name} "
                              f"{'pull' if name == 'github' else 'merge'} request",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        f.add_argument("--plan", metavar="PLAN.json", required=True,
                       help="what `gpulease plan --json` wrote")
        if name == "github":
            f.add_argument("--repo", default=env.get("GITHUB_REPOSITORY"),
                           help="OWNER/REPO (default: $GITHUB_REPOSITORY)")
            f.add_argument("--pull-request", type=int, metavar="N", required=True)
            f.add_argument("--api-url", default=env.get("GITHUB_API_URL",
                                                        "https://api.github.com"),
                           help="REST API root (default: $GITHUB_API_URL or api.github.com)")
        else:
            f.add_argument("--project", default=env.get("CI_PROJECT_ID"),
                           help="project id or path (default: $CI_PROJECT_ID)")
            f.add_argument("--merge-request", type=int, metavar="IID",
                           default=_int(env.get("CI_MERGE_REQUEST_IID")),
                           help="merge request IID (default: $CI_MERGE_REQUEST_IID)")
            f.add_argument("--api-url", default=env.get("CI_API_V4_URL",
                                                        "https://gitlab.com/api/v4"),
                           help="API v4 root (default: $CI_API_V4_URL or gitlab.com)")
        f.add_argument("--behavior", choices=BEHAVIORS, default="update")
        f.add_argument("--skip-no-diff", action="store_true",
                       help="post nothing when the monthly cost does not change")
        f.add_argument("--only-if-increase", action="store_true",
                       help="post nothing unless the monthly cost rises")
        f.add_argument("--dry-run", action="store_true", help="print the comment, call nothing")
        f.add_argument("--json", action="store_true", help="what was done, as JSON")
        f.set_defaults(func=run)


def _int(text):
    try:
        return int(text) if text else None
    except ValueError:
        return None


def run(args: argparse.Namespace) -> int:
    from gpulease import inputs
    from gpulease.pipeline import comments, markdown

    forge_name = args.forge
    problems = []
    if forge_name == "github" and not (args.repo and args.repo.count("/") == 1):
        problems.append(Finding("--repo", "give the repository as OWNER/REPO (or run in GitHub "
                                          "Actions, which sets GITHUB_REPOSITORY)"))
    if forge_name == "gitlab" and not args.project:
        problems.append(Finding("--project", "give the project id or path (or run in GitLab "
                                             "CI, which sets CI_PROJECT_ID)"))
    if forge_name == "gitlab" and not args.merge_request:
        problems.append(Finding("--merge-request", "give the merge request IID (or run in a "
                                                   "merge request pipeline: CI_MERGE_REQUEST_IID)"))
    if args.behavior == "hide-and-new" and forge_name == "gitlab":
        problems.append(Finding("--behavior", "GitLab cannot hide notes through its API: use "
                                              "update, delete-and-new or new"))
    if problems:
        raise ConfigError(problems)
    plan = inputs.load_json(Path(args.plan), error=ConfigError, field="--plan",
                            what="plan file", hint="; write it with `gpulease plan --json "
                                                   "--out PLAN.json`")
    if not isinstance(plan, dict) or not isinstance(plan.get("stack"), str) or \
            not isinstance(plan.get("totals"), dict):
        raise ConfigError([Finding("--plan", f"{args.plan} is not a `gpulease plan --json` "
                                             "document (no stack and totals)")])
    body = markdown.render(plan)
    delta = markdown.delta(plan)
    if args.dry_run:
        if args.json:
            print_json({"dry_run": True, "body": body, "delta_usd": delta})
        else:
            ui.out().stream.write(body)
        return 0
    var = TOKENS[forge_name]
    token = os.environ.get(var, "")
    if not token:
        raise CredentialsError(f"no {forge_name} token: set {var} (GitHub Actions: `env: "
                               f"GITHUB_TOKEN: ${{{{ secrets.GITHUB_TOKEN }}}}` with "
                               f"`permissions: pull-requests: write`; GitLab: a project access "
                               f"token with the api scope); nothing was called")
    if forge_name == "github":
        forge = comments.GitHub(args.repo, args.pull_request, token, api=args.api_url)
    else:
        forge = comments.GitLab(args.project, args.merge_request, token, api=args.api_url)
    out = comments.post(forge, body, stack=plan["stack"], behavior=args.behavior,
                        delta_usd=delta, skip_no_diff=args.skip_no_diff,
                        only_if_increase=args.only_if_increase)
    if args.json:
        print_json({**out.as_json(), "delta_usd": delta})
    else:
        ui.err().print(f"gpulease comment: {out.action}"
                       + (f" {out.id}" if out.id else "") + f" ({out.reason})")
    return 0
