"""The policy module: chooses cloud, region, instance, node count, purchase mix and template.

Contract used by the program and the CLI: ``decide(stack, catalog) -> EnvironmentDecision``;
raises ``PolicyError`` (findings naming config paths) when constraints cannot be met.
"""
from gpulease.policy.decide import decide

__all__ = ["decide"]
