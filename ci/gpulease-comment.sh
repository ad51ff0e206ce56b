#!/usr/bin/env bash
# Plan a gpulease stack offline, compare it with the base branch's plan, and post the result
# as a pull-request (GitHub) or merge-request (GitLab) comment. Used by the GitHub composite
# action (.github/actions/gpulease-comment) and the GitLab CI template
# (ci/gitlab/gpulease.gitlab-ci.yml); docs/pipeline.md.
#
# Environment:
#   GPULEASE_STACK              stack to plan (stacks/Pulumi.<stack>.yaml)            required
#   GPULEASE_FORGE              github | gitlab                                        required
#   GPULEASE_BASE_PLAN          the base branch's `gpulease plan --json` (for the change)
#   GPULEASE_BEHAVIOR           update | hide-and-new | delete-and-new | new   (default update)
#   GPULEASE_SKIP_NO_DIFF       true: no comment when the cost does not change
#   GPULEASE_ONLY_IF_INCREASE   true: no comment unless the cost rises
#   GPULEASE_PULL_REQUEST       GitHub pull request number (GitLab: CI_MERGE_REQUEST_IID)
#   GPULEASE_PLAN_OUT           where the plan JSON goes (default gpulease-plan.json)
#   GPULEASE_GATE_ACK           the pull request's labels, comma-separated: one listed in
#                               gpulease:gate.acknowledged turns a block into a recorded
#                               warning (gpulease plan reads it; GitLab: CI_MERGE_REQUEST_LABELS)
#   GITHUB_TOKEN / GITLAB_TOKEN the forge token (never printed)
# Exit: the plan's exit code (3 cost gate, 4 guardrail) after commenting, else the comment's.
set -euo pipefail
: "${GPULEASE_STACK:?set GPULEASE_STACK to the stack to plan}"
: "${GPULEASE_FORGE:?set GPULEASE_FORGE to github or gitlab}"
out=${GPULEASE_PLAN_OUT:-gpulease-plan.json}
if [ -z "${GPULEASE_GATE_ACK:-}" ] && [ -n "${CI_MERGE_REQUEST_LABELS:-}" ]; then
  export GPULEASE_GATE_ACK="$CI_MERGE_REQUEST_LABELS"
fi
plan=(plan --stack "$GPULEASE_STACK" --json --out "$out")
if [ -n "${GPULEASE_BASE_PLAN:-}" ]; then
  plan+=(--diff "$GPULEASE_BASE_PLAN")
fi
status=0
gpulease "${plan[@]}" || status=$?
if [ ! -s "$out" ]; then
  echo "gpulease-comment: no plan was written (exit $status); nothing to comment" >&2
  exit "$status"
fi
comment=(comment "$GPULEASE_FORGE" --plan "$out" --behavior "${GPULEASE_BEHAVIOR:-update}")
if [ "$GPULEASE_FORGE" = github ]; then
  : "${GPULEASE_PULL_REQUEST:?set GPULEASE_PULL_REQUEST to the pull request number}"
  comment+=(--pull-request "$GPULEASE_PULL_REQUEST")
fi
if [ "${GPULEASE_SKIP_NO_DIFF:-false}" = true ]; then
  comment+=(--skip-no-diff)
fi
if [ "${GPULEASE_ONLY_IF_INCREASE:-false}" = true ]; then
  comment+=(--only-if-increase)
fi
gpulease "${comment[@]}"
exit "$status"
