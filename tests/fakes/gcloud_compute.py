"""A fake ``gcloud`` for the GCP node scripts: the two Compute reads a node may make, behind IAM.

It stands for the Cloud SDK, the Compute Engine API and IAM together, as strictly as the node's
use needs:

- commands: only ``compute instance-groups managed list-instances MIG`` (the API's
  instanceGroupManagers.listManagedInstances, one call: the Cloud SDK's
  surface/compute/instance_groups/managed/list_instances.py) and ``compute instances describe
  NAME`` (instances.get). Any other command - ``compute instances list`` included - is refused
  like an unknown one (exit 2), so a node script that makes another call fails its test;
- flags: exactly one positional name, ``--zone`` and ``--project`` (``--flag value`` or
  ``--flag=value``) and ``--format=json``; an unknown flag is refused as gcloud refuses it
  ("unrecognized arguments", exit 2), a missing ``--zone`` as an underspecified resource
  (gcloud would list the project's zones to ask or guess: a project-wide read);
- IAM: each call is checked against the node's grant as IAM checks it - the permission the
  method documents on the resource it names (instanceGroupManagers.listManagedInstances:
  compute.instanceGroupManagers.get on the MIG; instances.get: compute.instances.get on the
  VM), then the binding's condition, a CEL expression evaluated with ``resource.name`` =
  ``projects/P/zones/Z/instanceGroupManagers/M`` or ``.../instances/N`` by cel-python (a CEL
  implementation, not a pattern match written for these tests). Denied: gcloud's "Could not
  fetch resource: Required '<permission>' permission for '<resource>'", exit 1, before the
  resource is looked up (no existence leak);
- answers: a MIG's members are the VMs whose ``created-by`` metadata names it (as the MIG sets
  it), each ``{"instance": <URL>, "instanceStatus": <status>, "currentAction": "NONE", "id"}``;
  a VM the MIG is still creating (``"_creating": True``) has no instanceStatus (the API leaves
  it empty while the VM does not exist) and ``describe`` does not find it; an unknown MIG or
  VM is "was not found" (exit 1).

``"garble": True`` in the state makes list-instances print an HTML page with exit 0 (a proxy's
answer). Every argv is appended to the log as one JSON line; every IAM decision to ``<log>.iam`` as
``[permission, resource name, allowed]``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

API = "https://www.googleapis.com/compute/v1"
COMMANDS = {("compute", "instance-groups", "managed", "list-instances"):
            ("gcloud.compute.instance-groups.managed.list-instances",
             "compute.instanceGroupManagers.get", "instanceGroupManagers"),
            ("compute", "instances", "describe"):
            ("gcloud.compute.instances.describe", "compute.instances.get", "instances")}
FLAGS = ("--zone", "--project", "--format")


def write(bin_dir: Path, *, state: dict, log: Path) -> Path:
    """Write ``bin_dir/gcloud`` answering from ``state``: {"project", "instances": [VM dicts],
    "migs": [names of MIGs that exist, members or not], "iam": {"permissions": [...],
    "condition": CEL or None} or None for no IAM check}."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_file = log.with_suffix(".state.json")
    state_file.write_text(json.dumps(state))
    root = Path(__file__).resolve().parents[2]
    exe = bin_dir / "gcloud"
    exe.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(root)!r})\n"
                   "from tests.fakes.gcloud_compute import main\n"
                   f"sys.exit(main(sys.argv[1:], {str(state_file)!r}, {str(log)!r}))\n")
    exe.chmod(0o755)
    return exe


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def decisions(log: Path) -> list[list]:
    iam = Path(str(log) + ".iam")
    return [json.loads(line) for line in iam.read_text().splitlines()] if iam.exists() else []


def allowed(iam: Optional[dict], permission: str, resource: str) -> bool:
    """Whether the grant ``iam`` allows ``permission`` on ``resource`` (a resource name)."""
    if iam is None:
        return True
    if permission not in iam["permissions"]:
        return False
    if not iam.get("condition"):
        return True
    import celpy

    env = celpy.Environment()
    program = env.program(env.compile(iam["condition"]))
    return bool(program.evaluate({"resource": celpy.json_to_cel({"name": resource})}))


def _parse(argv: list[str]):
    """(command key, positional, flags) or an (exit code, message) refusal."""
    for key in COMMANDS:
        if tuple(argv[:len(key)]) == key:
            rest = argv[len(key):]
            break
    else:
        words = [w for w in argv if not w.startswith("-")]
        return None, (2, f"ERROR: (gcloud) Invalid choice: {' '.join(words[:4])!r}.")
    group = COMMANDS[key][0]
    positional, flags, bad = [], {}, []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name not in FLAGS:
                bad.append(word)
            elif eq:
                flags[name] = value
            elif i + 1 < len(rest):
                flags[name] = rest[i + 1]
                i += 1
            else:
                return None, (2, f"ERROR: ({group}) argument {name}: expected one argument")
        else:
            positional.append(word)
        i += 1
    if bad:
        return None, (2, f"ERROR: ({group}) unrecognized arguments: {' '.join(bad)}")
    if len(positional) != 1:
        return None, (2, f"ERROR: ({group}) expected exactly one name, got {positional}")
    if "--zone" not in flags:
        return None, (1, f"ERROR: ({group}) Underspecified resource [{positional[0]}]. "
                         "Specify the [--zone] flag.")
    if flags.get("--format") != "json":
        return None, (2, f"ERROR: ({group}) this fake prints --format=json only")
    return (key, positional[0], flags), None


def main(argv: list[str], state_file: str, log: str) -> int:
    with open(log, "a") as f:
        f.write(json.dumps(argv) + "\n")
    parsed, refusal = _parse(argv)
    if refusal:
        code, message = refusal
        sys.stderr.write(message + "\n")
        return code
    key, name, flags = parsed
    state = json.loads(Path(state_file).read_text())
    project = flags.get("--project") or state["project"]
    zone = flags["--zone"]
    group, permission, collection = COMMANDS[key]
    resource = f"projects/{project}/zones/{zone}/{collection}/{name}"
    ok = allowed(state.get("iam"), permission, resource) and project == state["project"]
    with open(log + ".iam", "a") as f:
        f.write(json.dumps([permission, resource, ok]) + "\n")
    if not ok:
        sys.stderr.write(f"ERROR: ({group}) Could not fetch resource:\n - Required "
                         f"'{permission}' permission for '{resource}'\n")
        return 1
    if state.get("garble") and collection == "instanceGroupManagers":
        print("<html><body>proxy error</body></html>")    # exit 0 and not JSON
        return 0
    vms = [vm for vm in state["instances"]
           if str(vm.get("zone", "")).rsplit("/", 1)[-1] == zone]
    if collection == "instances":
        found = [vm for vm in vms if vm["name"] == name and not vm.get("_creating")]
        if not found:
            sys.stderr.write(f"ERROR: ({group}) Could not fetch resource:\n - The resource "
                             f"'{resource}' was not found\n")
            return 1
        vm = {k: v for k, v in found[0].items() if not k.startswith("_")}
        print(json.dumps({**vm, "selfLink": f"{API}/{resource}"}, indent=2))
        return 0
    members = [vm for vm in vms if _mig_of(vm) == name]
    if not members and name not in state.get("migs", ()):
        sys.stderr.write(f"ERROR: ({group}) Could not fetch resource:\n - The resource "
                         f"'{resource}' was not found\n")
        return 1
    out = []
    for i, vm in enumerate(members):
        entry = {"instance": f"{API}/projects/{project}/zones/{zone}/instances/{vm['name']}",
                 "id": str(1000 + i), "currentAction": "CREATING" if vm.get("_creating")
                 else "NONE"}
        if not vm.get("_creating"):
            entry["instanceStatus"] = vm.get("status", "RUNNING")
        out.append(entry)
    print(json.dumps(out, indent=2))
    return 0


def _mig_of(vm: dict) -> Optional[str]:
    items = (vm.get("metadata") or {}).get("items") or []
    by = next((i.get("value") for i in items if i.get("key") == "created-by"), None)
    return str(by).rsplit("/", 1)[-1] if by else None
