"""`gpulease render`: write every file a cluster's nodes boot with, to read and diff before `pulumi up`."""
from __future__ import annotations

import argparse
from pathlib import Path

from gpulease.cli import COMMANDS, ui
from gpulease.cli.common import add_output_args, add_stack_args, load_stack, print_json
from gpulease.errors import ConfigError, Finding, did_you_mean

DESCRIPTION = """\
Render the node bootstrap of one cluster: the cloud-config user data and every file it
embeds (setup and check scripts, spot watcher, checkpoint hook, autostop, shutdown cleaner,
systemd units, the CloudWatch agent / Ops Agent config, env files). Files are written to
OUT/<purchase-model>/ for each purchase model the cluster's nodes use (AWS: one blended
group, "mixed" when it holds spot and on-demand nodes; GCP: one group per model), exactly as
they boot: OUT/<model>/cloud-config.yaml is the user data, OUT/<model>/usr/local/sbin/... the
scripts. Offline: reads the stack file and the price catalog only."""

EPILOG = """\
examples:
  gpulease render --stack prod --cluster pretrain --out build/pretrain
  gpulease render --config stacks/Pulumi.dev.yaml --cluster sandbox --out /tmp/boot --json

exit codes: 0 ok · 2 bad input (unknown cluster, OUT is a file) or no plan satisfies the policy"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help=COMMANDS["render"],
                       description=DESCRIPTION, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stack_args(p)
    p.add_argument("--cluster", metavar="NAME", required=True, help="cluster to render")
    p.add_argument("--out", metavar="DIR", required=True, help="directory to write into")
    add_output_args(p, out=False)   # --out is the directory of files this command writes
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gpulease.bootstrap.render import (CLOUD_CONFIG, NODE_FILES, purchase_models_for,
                                           render_node_files)
    from gpulease.policy import decide  # the policy is only needed by this command's run

    modes = {f.key: int(f.mode, 8) for f in NODE_FILES}

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError([Finding("--out", f"{out} exists and is not a directory; "
                                   "pass a directory (it is created if missing)")])
    loaded = load_stack(args)
    names = [c.name for c in loaded.spec.clusters]
    if args.cluster not in names:
        raise ConfigError([Finding("--cluster", f'no cluster "{args.cluster}" in '
                                   f"{loaded.source}{did_you_mean(args.cluster, names)}; "
                                   f"clusters: {', '.join(names) or 'none'}")])
    ui.err().print(f"deciding placement for {loaded.source} ...")
    decision = decide(loaded.spec, loaded.catalog).cluster(args.cluster)
    written: list[dict] = []
    for model in purchase_models_for(decision):
        files = render_node_files(stack=loaded.spec, decision=decision, purchase_model=model)
        for rel, content in files.items():
            path = out / model / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            path.chmod(modes.get(rel, 0o644))
            written.append({"purchase_model": model, "path": str(path),
                            "bytes": len(content.encode()), "user_data": rel == CLOUD_CONFIG})
    if args.json:
        print_json({"cluster": decision.name, "cloud": decision.cloud,
                    "region": decision.region, "instance_type": decision.offering.instance_type,
                    "files": written})
        return 0
    o = ui.out()
    o.line((decision.name, "bold"), f": {decision.nodes} x {decision.offering.instance_type} on "
           f"{decision.cloud} {decision.region} ({decision.network} fabric), "
           f"{ui.plural(len(written), 'file')} written")
    o.print(o.table([ui.Col("purchase"), ui.Col("file"), ui.Col("bytes", right=True),
                     ui.Col("")],
                    [[ui.model_word(w["purchase_model"]), w["path"], f"{w['bytes']:,}",
                      ("user data", "cyan") if w["user_data"] else ""] for w in written],
                    indent=2))
    return 0
