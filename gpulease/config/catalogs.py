"""Which price catalog a stack plans with: the --catalog / --catalog-version flags, else the
stack's gpulease:catalog / gpulease:catalog_version, else the shipped default."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from gpulease.catalog import Catalog, load_catalog
from gpulease.config.messages import headline
from gpulease.config.schema import NAMESPACE
from gpulease.errors import CatalogError, ConfigError, Finding


def catalog_selection(values: Mapping[str, Any]) -> tuple[Optional[str], Optional[str]]:
    """(path, version) of the catalog the stack asks for, before full validation."""
    path = values.get(f"{NAMESPACE}:catalog")
    version = values.get(f"{NAMESPACE}:catalog_version")
    return (path if isinstance(path, str) else None,
            version if isinstance(version, str) else None)


def load_stack_catalog(values: Mapping[str, Any], *, source: str,
                       path: Optional[str] = None, version: Optional[str] = None) -> Catalog:
    """The catalog a stack plans with: ``path`` / ``version`` (--catalog / --catalog-version)
    win over the stack's gpulease:catalog / gpulease:catalog_version. A catalog the stack file
    asks for that cannot be loaded is reported at the stack file's key (then the catalog's own
    findings), not as if it came from a flag."""
    if path or version:
        return load_catalog(path, version)
    c_path, c_version = catalog_selection(values)
    if c_path and c_version:
        raise ConfigError([Finding(f"{NAMESPACE}:catalog", f"gives a catalog file and "
                                   f"{NAMESPACE}:catalog_version a shipped version: keep one",
                                   source=source)], headline=headline(source))
    try:
        return load_catalog(c_path, c_version)
    except CatalogError as exc:
        if not (c_path or c_version):
            raise
        key = f"{NAMESPACE}:catalog" if c_path else f"{NAMESPACE}:catalog_version"
        what = f"the catalog file {c_path!r}" if c_path else f"catalog version {c_version!r}"
        first = Finding(key, f"{what} cannot be used (below); fix the key or remove it to plan "
                        "with the default catalog", source=source)
        raise CatalogError([first, *exc.findings], headline=headline(source)) from None
