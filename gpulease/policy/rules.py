"""Policy rules from the field, as a typed model: defaults that `gpulease:policy` may override."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from gpulease.model import MAX_CHECKPOINT_MINUTES, MAX_CLUSTER_GPUS

#: more than one interruption a minute is no spot market, it is a typo.
MAX_INTERRUPTIONS_PER_HOUR = 60.0
#: mean hours spot stays gone once it has gone (the offline price of window work on spot,
#: docs/policy.md "Deadline-aware spot"): the mean length of the 3,642 spells without spot in
#: the 20 availability traces of skypilot-org/spot-traces (commit 221da1a; AWS V100/K80,
#: 1-16 nodes, Oct 2022 - Sep 2023; measured 2026-12-04 with 1-node availability: 1.64 h,
#: median 0.38 h). The paper's authors released them (Wu et al., NSDI 2024).
SPOT_OUTAGE_HOURS = 1.64
#: more ranked alternatives than anyone reads.
MAX_ALTERNATIVES = 1000


class PolicyRules(BaseModel):
    """`gpulease:policy` — every rule of the policy module, each overridable per stack."""

    # strict: true/false is not a number, 12.0 is not a count (gpulease/config/schema.py's _Strict)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)

    reserved_above_priority: int = Field(
        8, ge=0, le=10,
        description="Clusters with priority above this need guaranteed capacity, never spot: "
                    "the baseline (every node of a one-step cluster) reserved/committed, the "
                    "burst of a demand profile reserved or on-demand by cost.")
    spot_below_priority: int = Field(
        5, ge=1, le=11,
        description="Clusters with priority below this run on spot when checkpoint_minutes is set.")
    commitment_term: Literal["1y", "3y", "none", "auto"] = Field(
        "1y", description="Commitment length priced for reserved nodes: 1y or 3y; none = no "
                          "commitment (guaranteed nodes become plain capacity reservations at the "
                          "on-demand rate); auto = per cluster the term that costs least over "
                          "commitment_horizon_months, counting the months a commitment bills after "
                          "the horizon (docs/policy.md).")
    commitment_horizon_months: int = Field(
        12, ge=1, le=120,
        description="How many months the clusters' baseline is surely needed: commitment_term "
                    "auto weighs each term's saving against the months it would bill beyond it "
                    "(a 3y commitment bills 36 months even if the horizon is 18); `gpulease "
                    "explain` compares the terms over it.")
    require_rdma_for_distributed: bool = Field(
        True, description="Multi-node distributed work only on RDMA-capable offerings "
                          "(EFA; GPUDirect-TCPX/TCPXO/RDMA).")
    max_nodes_without_rdma: int = Field(
        8, ge=1, le=MAX_CLUSTER_GPUS,
        description="Largest distributed cluster allowed on TCP-only networking when "
                    "require_rdma_for_distributed is false.")
    spot_interruptions_per_hour: Optional[float] = Field(
        None, ge=0, le=MAX_INTERRUPTIONS_PER_HOUR,
        description="Override of the catalog's expected spot interruptions per "
                    "node-hour (used for the rework cost).")
    spot_outage_hours: float = Field(
        SPOT_OUTAGE_HOURS, gt=0, le=24 * 30,
        description="Mean hours spot capacity stays gone once interrupted: with the "
                    "interruption rate it is the availability model window work on spot is "
                    "priced under (the deadline rule's expected spot and on-demand fallback "
                    "hours; docs/policy.md \"Deadline-aware spot\"). Default: the mean spell "
                    "without spot in the public skypilot-org/spot-traces availability traces "
                    "(1.64 h, measured 2026-12-04).")
    tcp_communication_share: float = Field(
        0.12, ge=0, lt=1,
        description="Share of a TCP-only distributed job's time lost to communication (up to "
                    "max_nodes_without_rdma nodes); charged as extra node-hours.")
    spot_restart_minutes: float = Field(
        10, ge=0, le=MAX_CHECKPOINT_MINUTES,
        description="Minutes to replace an interrupted spot node and reload the last "
                    "checkpoint (part of the rework cost).")
    reserve_at_on_demand_rate: bool = Field(
        True, description="When the catalog has no commitment price for an offering, price "
                          "guaranteed capacity as a plain capacity reservation, billed at the "
                          "on-demand rate every hour of the month (AWS On-Demand Capacity "
                          "Reservations and GCP reservations without a commitment bill so). "
                          "false = such offerings cannot hold reserved nodes.")
    max_alternatives: int = Field(
        10, ge=0, le=MAX_ALTERNATIVES,
        description="How many ranked alternatives each cluster decision lists.")
    quote_max_age_hours: float = Field(
        24, gt=0, le=24 * 56,
        description="A live quote (a Capacity Block offering, a calendar-mode recommendation) "
                    "older than this is not used to price a window: offerings change by the "
                    "hour. gpulease's default, not a cloud figure; published rates never expire "
                    "(they are shown with their date).")
    flex_start_queue_hours: float = Field(
        24, ge=0, le=24 * 120,
        description="Hours a flex-start request may wait in the queue for capacity: a window "
                    "must leave the run plus this much before the deadline for flex-start to "
                    "count as meeting it. Google publishes no queue time; this default is "
                    "gpulease's assumption (docs/policy.md, \"Windows\").")
    allow_cross_cloud_data: bool = Field(
        True, description="Allow clusters on another cloud than their dataset's home "
                          "(egress is charged either way).")
