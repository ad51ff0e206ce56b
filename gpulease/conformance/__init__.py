"""Conformance: the plan's inputs checked against the specs the cloud APIs publish."""
from gpulease.conformance.check import ERROR, WARNING, check, has_errors  # noqa: F401
from gpulease.conformance.names import physical_name  # noqa: F401
