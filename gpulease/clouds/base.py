"""The Cloud interface: every question shared code asks about a cloud, answered by its object.

Shared modules (model, bootstrap, costing, planner, reaper engine, CLI, ...) never compare cloud
names: they look the cloud up in ``gpulease.clouds.registry`` and ask it. Each cloud defines its
object in ``gpulease/clouds/<cloud>/cloud.py``.

Plain Python on purpose: the reaper bundles (AWS Lambda, GCP Cloud Function) import this module
through ``gpulease.model``, without Pulumi, pydantic or any cloud SDK (an SDK is imported only
in the per-cloud modules the object names).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional

#: how a cloud carries gpulease's keys on resources: AWS tags (any value), GCP labels (encoded).
TagStyle = Literal["tags", "labels"]
#: where a cloud's monitoring and reaper calls are scoped: an AWS region, a GCP project.
LocationScope = Literal["region", "project"]


@dataclass(frozen=True)
class Cloud(abc.ABC):
    """One cloud gpulease deploys to: its words, encodings, defaults and module paths.

    Module paths name the per-cloud file of each role package; ``gpulease.clouds.registry``
    lists them all (the files a new cloud adds: docs/architecture.md "Adding a cloud")."""

    #: the name stacks, catalogs and plans use ("aws").
    name: str
    #: the name in messages ("AWS", "Google Cloud").
    title: str
    #: the Pulumi provider: the package of its type tokens ("aws:ec2/instance:Instance").
    provider: str
    #: the Python SDK of that provider (``pulumi_aws``).
    sdk_package: str
    tag_style: TagStyle
    #: words for a cluster's node group and the templates its nodes boot from.
    node_group: str
    node_templates: str
    #: URL scheme of the object store (``s3://bucket/prefix``).
    url_scheme: str
    location_scope: LocationScope
    #: regular expression a region name of this cloud matches.
    region_pattern: str
    #: a region name for messages ("like us-east-1").
    region_example: str
    #: regular expression of a zone as catalog rows and price files spell it.
    zone_pattern: str
    #: a zone's name starts with its region's and "-" (so a row's zones must).
    zones_in_region: bool
    #: what a zone should look like, for messages, one and many (``{region}``: the row's).
    zone_text: str
    zones_text: str
    #: every storage class the object store's API accepts, in lifecycle order (what a catalog
    #: storage row may name).
    storage_classes: tuple[str, ...]
    #: storage classes per tier, hot -> warm -> cold -> archive (the lifecycle order).
    tier_classes: tuple[str, str, str, str]
    #: (class, days): earliest age a lifecycle rule may move an object into a class (others:
    #: day 1).
    min_transition_days: tuple[tuple[str, int], ...]
    #: storage classes whose objects must be restored (hours) before anything can read them.
    restore_classes: tuple[str, ...]
    #: window-only purchase models (gpulease.purchase.WINDOW_ONLY) the cloud sells at all.
    window_models: frozenset[str]
    #: a window quote names its zone and the cluster lands there (a zonal purchase answered by
    #: the quote), rather than in the zone the policy chose.
    quote_picks_zone: bool
    #: (price column's purchase model, why): why the catalog keeps one source's figure over
    #: another for that column (docs/catalog.md "Sources and precedence"); `explain` shows it
    #: beside disagreeing figures.
    price_precedence: tuple[tuple[str, str], ...]
    # ---- node bootstrap -------------------------------------------------------------------
    #: seconds between a spot interruption notice and the node's end.
    notice_window_seconds: int
    #: how often the spot watcher polls the metadata server.
    poll_seconds: int
    metadata_url: str
    #: (template, node path) of the files only this cloud's nodes boot with (agent configs).
    node_files: tuple[tuple[str, str], ...]
    # ---- credentials ----------------------------------------------------------------------
    #: what to set when the SDK finds no credentials (the one text every command prints).
    credentials_hint: str
    # ---- module paths: the per-cloud file of each role package ----------------------------
    #: ``deploy(env, catalog, *, storage, only_clusters=None) -> list[pulumi.Resource]``
    #: (see ``gpulease.program.deploy_clouds``).
    deploy_module: str
    #: the reaper adaptor (discovery and actions; plain Python + the cloud SDK).
    reaper_module: str
    #: the scheduled reaper's Pulumi component: ``prepare(env) -> () -> list[pulumi.Resource]``
    #: (checks first, declares when called; see ``gpulease.reaper.deploy.deploy_reaper``).
    reaper_deploy_module: str
    #: live window and spot-risk quotes (`gpulease catalog quotes --source live`).
    quotes_module: str
    #: the catalog's price and spec fetcher (`gpulease catalog refresh`).
    fetcher_module: str
    #: the credentials check: ``missing() -> Optional[str]`` (why the SDK's own chain finds
    #: nothing) and ``reason(exc) -> Optional[str]`` (for the SDK's "no credentials" error).
    credentials_module: str
    #: the commands' part on this cloud: the clients `reap`, `recommend`, `catalog refresh` and
    #: `catalog quotes` create from their flags, and ``NEEDS`` (command -> what it reads here).
    cli_module: str
    # ---- what is already paid for (issue 32) ----------------------------------------------
    #: (kind, purchase model) of each product `gpulease inventory` reads on this cloud
    #: (``gpulease.inventory.model.KINDS``).
    inventory_kinds: tuple[tuple[str, str], ...] = ()
    #: the inventory reader: ``collect(scope, regions, *, progress) -> (holdings, source)``.
    inventory_module: str = ""

    @property
    def module_paths(self) -> dict[str, str]:
        """Role -> module this cloud provides for it (every one importable)."""
        return {"deploy": self.deploy_module, "reaper": self.reaper_module,
                "reaper_deploy": self.reaper_deploy_module,
                "quotes": self.quotes_module, "fetcher": self.fetcher_module,
                "credentials": self.credentials_module, "cli": self.cli_module,
                "inventory": self.inventory_module,
                "cloud": f"gpulease.clouds.{self.name}.cloud"}

    # ---- names -----------------------------------------------------------------------------
    @abc.abstractmethod
    def default_zone(self, region: str) -> str:
        """The region's first zone by naming convention (for catalog rows without zones)."""

    @abc.abstractmethod
    def continent_of(self, region: str) -> str:
        """Continent of a region, from the provider's naming (for inter-continent egress)."""

    @abc.abstractmethod
    def family_of(self, instance_type: str) -> str:
        """The instance family a type belongs to (the key of its documented facts)."""

    # ---- tags and labels -------------------------------------------------------------------
    @abc.abstractmethod
    def tag_value(self, value: object) -> str:
        """A value as this cloud's resources carry it (what the reaper's filters match)."""

    @abc.abstractmethod
    def cost_tags(self, values: Mapping[str, str], monthly_usd: Any,
                  one_time_usd: Any = 0) -> dict[str, str]:
        """The tags/labels the cost transform stamps: ``values`` encoded, plus the monthly cost
        in this cloud's encoding and - only when non-zero - the one-time amount apart
        (``tags.ONE_TIME_USD`` / ``ONE_TIME_CENTS``: never inside the monthly figure)."""

    # ---- node groups and bootstrap ---------------------------------------------------------
    @abc.abstractmethod
    def node_group_models(self, used: tuple[str, ...]) -> tuple[str, ...]:
        """The node purchase models a cluster's node groups boot, given the purchase models
        its decision uses (non-empty, in the decision's order)."""

    def node_group_names(self, cluster: str, models: tuple[str, ...], *,
                         deadline_standby: bool) -> tuple[str, ...]:
        """Names of the cluster's node groups its nodes need at boot (the groups whose
        members a node may list); () where a node finds its group from its own identity."""
        return ()

    @abc.abstractmethod
    def encode_user_data(self, cloud_config: str) -> str:
        """The user data value this cloud's API takes for a cloud-config."""

    def project(self, cloud_spec: Optional[object]) -> str:
        """The project a node or a reaper call runs in ("" where the cloud has none)."""
        return ""

    def keeps_sshd(self, cloud_spec: Optional[object]) -> bool:
        """True when the stack reaches nodes over SSH (so their sshd stays)."""
        return False

    def location(self, *, region: str, cloud_spec: Optional[object]) -> str:
        """Where a cluster's metrics are read: its region or its project."""
        return region if self.location_scope == "region" else self.project(cloud_spec)

    # ---- purchase options ------------------------------------------------------------------
    @abc.abstractmethod
    def window_options_by_default(self, instance_type: str) -> frozenset[str]:
        """Window purchase options a type is sold as when its catalog row records none from
        the provider's documentation (``gpulease.quotes.sold_as``)."""
