"""Where gpulease's data files are: the one module that finds them (``importlib.resources``).

Two kinds of data:

- **package data** inside ``gpulease/`` — price catalogs (``catalog/data``), instance-family
  facts (``catalog/families.json``), quote data (``quotes/data``), conformance specs
  (``conformance/data``), the offline lookups and replace-on-change tables (``planner/data``).
  The same relative path in a checkout and in an installed wheel: :func:`package_path`.
- the project's **top-level folders** ``templates/`` (bootstrap, monitoring, report and cluster
  templates) and ``policy-pack/`` (the CrossGuard pack). In a checkout they sit beside ``gpulease/``,
  where Pulumi.yaml, the docs and `pulumi preview --policy-pack policy-pack` expect them; the
  wheel carries copies inside the package as ``gpulease/_data/<folder>`` (hatchling
  ``force-include`` in pyproject.toml). :func:`top_level` answers the wheel's copy when the
  package has one, else the checkout's folder (editable install, the Pulumi program).

``python -m gpulease.datafiles templates`` (or ``policy-pack``) prints the folder in use, e.g.
``pulumi preview --policy-pack "$(python -m gpulease.datafiles policy-pack)"`` with a wheel install.
"""
from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

#: the package whose files these are
PACKAGE = "gpulease"
#: where the wheel puts the top-level folders inside the package
BUNDLED = "_data"
#: the project's top-level data folders a wheel carries
TOP_LEVEL = ("templates", "policy-pack")
#: the Pulumi program's folder (Pulumi.yaml ``main: infra/``); a wheel carries its entry point
PROGRAM = "infra"


def package_root() -> Path:
    """The ``gpulease`` package directory (in the checkout or in site-packages)."""
    return _as_path(resources.files(PACKAGE))


def package_path(*parts: str) -> Path:
    """A file or folder of the package's own data, e.g. ``package_path("catalog", "data")``."""
    return _as_path(resources.files(PACKAGE).joinpath(*parts))


def top_level(name: str, *parts: str) -> Path:
    """A top-level data folder (``templates`` / ``policy-pack``) or a path under it: the copy the
    installed wheel carries, else the checkout's folder beside ``gpulease/``."""
    if name not in TOP_LEVEL:
        raise ValueError(f"{name!r} is not one of the data folders {TOP_LEVEL}")
    bundled = resources.files(PACKAGE).joinpath(BUNDLED, name)
    base = _as_path(bundled) if bundled.is_dir() else package_root().parent / name
    return base.joinpath(*parts)


def templates(*parts: str) -> Path:
    """``templates/`` or a path under it (``templates("bootstrap")``)."""
    return top_level("templates", *parts)


def policy_pack() -> Path:
    """The CrossGuard pack's folder (``policy-pack/``)."""
    return top_level("policy-pack")


def program_file() -> Path:
    """The Pulumi program `pulumi up` runs and `gpulease plan` loads: the copy an installed wheel
    carries (``gpulease/_data/infra/__main__.py``), else the checkout's ``infra/__main__.py``
    beside the package."""
    bundled = resources.files(PACKAGE).joinpath(BUNDLED, PROGRAM, "__main__.py")
    if bundled.is_file():
        return _as_path(bundled)
    return package_root().parent / PROGRAM / "__main__.py"


def missing() -> list[str]:
    """The top-level folders this installation lacks (empty for a checkout or a sound wheel)."""
    return [name for name in TOP_LEVEL if not top_level(name).is_dir()]


def _as_path(traversable) -> Path:
    # gpulease is installed unpacked (a wheel, an editable checkout): its resources are files.
    # A zipped install would hand back a zip path that jinja2 and pathlib cannot open.
    if isinstance(traversable, Path):
        return traversable
    raise RuntimeError(f"gpulease's data files are not on the file system ({traversable}); "
                       "install gpulease unpacked (pip install gpulease), not as a zip")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in TOP_LEVEL:
        print(f"usage: python -m gpulease.datafiles {{{'|'.join(TOP_LEVEL)}}}", file=sys.stderr)
        return 2
    path = top_level(argv[0])
    if not path.is_dir():
        print(f"error: this gpulease installation has no {argv[0]}/ ({path}); reinstall it",
              file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised by tests/test_distribution.py
    sys.exit(main(sys.argv[1:]))
