"""Conformance: the plan's inputs checked against the specs the cloud APIs publish."""
from infra.conformance.check import ERROR, WARNING, check, has_errors  # noqa: F401
from infra.conformance.names import physical_name  # noqa: F401
