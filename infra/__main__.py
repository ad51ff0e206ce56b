"""The gpulease Pulumi program (`main: infra/` in Pulumi.yaml): it wires a stack's steps in
order - config -> decision -> cost transform -> cloud components -> stack outputs - from the
`gpulease` library, and holds no logic of its own.

`pulumi up` runs this file (the language host runs the folder as ``__main__``); `gpulease plan`
loads the very same file and calls :func:`main` in-process under Pulumi's mock runtime
(``gpulease.planner.program``): the checkout's ``infra/__main__.py``, or the copy an installed
wheel carries as ``gpulease/_data/infra/__main__.py`` (``gpulease.datafiles.program_file``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Collection, Iterable, Optional

import pulumi

from gpulease import clock, gctuning
from gpulease.config import load_stack_catalog, located, parse_stack_config
from gpulease.costing import transform as cost_transform
from gpulease.errors import InputError
from gpulease.program import (ProgramResult, config_values, deploy_clouds, deploy_owned,
                              export_outputs, stack_source)

#: the project directory (Pulumi.yaml, stacks/): this program's folder lives in it.
PROJECT_DIR = Path(__file__).resolve().parents[1]


def main(file_keys: Optional[Iterable[str]] = None, *,
         clusters: Optional[Collection[str]] = None,
         source: Optional[str] = None) -> ProgramResult:
    """The program. ``file_keys``: the keys of the stack file the config came from (`gpulease
    plan` passes those of the file it read; `pulumi up` reads them beside the program).

    ``clusters`` (`gpulease plan`'s preview check only; `pulumi up` never passes it): declare
    the components of these clusters only, with everything the program declares before the
    last of them exactly as always (``gpulease.program.deploy_clouds``)."""
    stack = pulumi.get_stack()
    values = config_values(stack, file_keys, project_dir=PROJECT_DIR)
    # the file the config came from: `gpulease plan --config FILE` passes it; `pulumi up`
    # reads stacks/Pulumi.<stack>.yaml
    source = source or stack_source(stack)
    with located(source, path=PROJECT_DIR / source):   # findings at the file's line:column
        catalog = load_stack_catalog(values, source=source)
        spec = parse_stack_config(values, stack=stack, source=source, catalog=catalog)
    for warning in spec.warnings:
        pulumi.log.warn(str(warning))

    from gpulease.policy import decide

    now = clock.now()
    env = decide(spec, catalog, now=now)
    ledger = cost_transform.register(spec, catalog)
    ledger.record_owned(env)   # owned pools: charged without a cloud resource (docs/owned.md)
    deploy_clouds(env, catalog, spec, clusters=clusters)
    owned = deploy_owned(spec, now.date()) if clusters is None else []
    export_outputs(env, catalog, ledger)
    return ProgramResult(decision=env, catalog=catalog, ledger=ledger, owned_notes=tuple(owned))


if __name__ == "__main__":
    gctuning.enable()  # the language host runs the program once per process (gpulease.gctuning)
    try:
        main()
    except InputError as exc:
        # A clear, located message instead of a Python traceback in `pulumi up`.
        raise pulumi.RunError(str(exc)) from None
