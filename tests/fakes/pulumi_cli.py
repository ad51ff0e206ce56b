"""A stand-in `pulumi` executable for `gpulease reap --destroy` tests (no Pulumi CLI can run here).

It answers exactly the commands the Automation API sends for ``select_stack(...).destroy(...)``
(``version``; ``stack select``; ``destroy``; ``stack history --json``) and fails loudly on
anything else. State is a JSON file: the stacks that exist and the URNs of their resources, with
``protect`` flags. Like the real engine, ``destroy`` refuses a stack holding protected resources
with the diagnostic pulumi/pulumi#8158 quotes, unless ``--exclude-protected`` is given, in which
case it deletes everything else and leaves the protected resources in the state.
Every invocation is appended to ``calls.jsonl`` beside the state.
"""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

VERSION = "v3.272.0"


def install(bin_dir: Path, stacks: dict) -> Path:
    """Write ``bin_dir/pulumi`` and its state; ``stacks`` = {name: [{"urn", "protect"}]}."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "state.json").write_text(json.dumps(stacks))
    exe = bin_dir / "pulumi"
    exe.write_text(f"#!{sys.executable}\nimport os, runpy\n"
                   f"os.environ['FAKE_PULUMI_DIR'] = {str(bin_dir)!r}\n"
                   f"runpy.run_path({__file__!r}, run_name='__main__')\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def main(argv: list[str]) -> int:
    here = Path(os.environ["FAKE_PULUMI_DIR"])
    with open(here / "calls.jsonl", "a") as fh:
        fh.write(json.dumps(argv) + "\n")
    state_path = here / "state.json"
    stacks = json.loads(state_path.read_text())
    args = [a for a in argv if a != "--non-interactive"]
    stack = args[args.index("--stack") + 1] if "--stack" in args else None
    if args[:1] == ["version"]:
        print(VERSION)
        return 0
    if stack is not None and stack not in stacks:
        print(f"error: no stack named '{stack}' found", file=sys.stderr)
        return 255
    if args[:2] == ["stack", "select"]:
        return 0
    if args[:1] == ["destroy"]:
        if "--yes" not in args or "--skip-preview" not in args:
            print("error: --yes must be passed in to proceed when running in non-interactive "
                  "mode", file=sys.stderr)
            return 255
        res = stacks[stack]
        protected = [r for r in res if r.get("protect")]
        if protected and "--exclude-protected" not in args:
            for r in protected:
                kind, name = r["urn"].split("::")[-2:]
                print(f"Diagnostics:\n  {kind} ({name}):\n    error: Preview failed: unable to "
                      f"delete resource \"{r['urn']}\"\n    as it is currently marked for "
                      "protection. To unprotect the resource, either remove the `protect` flag "
                      "from the resource in your Pulumi program and run `pulumi up`, or use "
                      f"the command:\n    `pulumi state unprotect {r['urn']}`", file=sys.stderr)
            return 255
        deleted = len(res) - len(protected)
        stacks[stack] = protected
        state_path.write_text(json.dumps(stacks))
        print(f"Destroying (stack {stack})\nResources:\n    - {deleted} deleted\n"
              f"    {len(protected)} unchanged\n")
        (here / f"last-{stack}.json").write_text(json.dumps({"delete": deleted,
                                                             "same": len(protected)}))
        return 0
    if args[:3] == ["stack", "history", "--json"]:
        last = here / f"last-{stack}.json"
        changes = json.loads(last.read_text()) if last.exists() else {}
        print(json.dumps([{"version": 1, "kind": "destroy", "startTime": "2026-12-02T12:00:00.000Z",
                           "message": "", "environment": {}, "config": {},
                           "result": "succeeded", "endTime": "2026-12-02T12:00:05.000Z",
                           "resourceChanges": changes}]))
        return 0
    print(f"error: the fake pulumi does not know `pulumi {' '.join(argv)}`", file=sys.stderr)
    return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
