"""The toolkit's own error types and exit codes (one place; the CLI maps them to exits)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

#: Exit codes shared by every `gpulease` command (documented in README "Exit codes").
EXIT_OK = 0
EXIT_FAILED = 1          # something failed at run time (cloud API, partial reap failure)
EXIT_BAD_INPUT = 2       # bad config / arguments / catalog: nothing was done
EXIT_COST_INCREASE = 3   # `plan --diff ... --fail-on-increase PCT` exceeded
EXIT_POLICY = 4          # a mandatory guardrail failed in `gpulease plan`


@dataclass(frozen=True)
class Finding:
    """One problem found in user input. ``path`` is the config path (``gpulease:clusters[1].gpus``)."""

    path: str
    message: str
    level: str = "error"  # "error" | "warning"
    source: str = ""      # file, e.g. stacks/Pulumi.dev.yaml

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}{self.path}: {self.message}"


class GpuleaseError(Exception):
    """Base error; ``exit_code`` tells the CLI how to exit."""

    exit_code = EXIT_FAILED


class InputError(GpuleaseError):
    """Bad user input, reported as a list of findings at once (exit 2)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, findings: Iterable[Finding], headline: Optional[str] = None):
        self.findings = [f for f in findings]
        self.headline = headline
        super().__init__(self.render())

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    def render(self) -> str:
        lines = [self.headline] if self.headline else []
        lines += [str(f) for f in self.findings]
        return "\n".join(lines)


class ConfigError(InputError):
    """The stack configuration is invalid."""


class CatalogError(InputError):
    """The price catalog file is invalid or missing."""


class PolicyError(InputError):
    """No decision satisfies the constraints (infeasible cluster, quota, budget)."""


class GuardrailError(InputError):
    """A mandatory guardrail the program itself enforces (exit 4): e.g. buying a prepaid
    Capacity Block without approval. Like every InputError, nothing is declared."""

    exit_code = EXIT_POLICY


class CloudError(GpuleaseError):
    """A cloud API call failed after retries (translated at the adaptor boundary)."""

    def __init__(self, cloud: str, operation: str, message: str, retryable: bool = False, *,
                 status: Optional[int] = None):
        self.cloud, self.operation, self.retryable = cloud, operation, retryable
        #: the HTTP status the API answered (None: no answer, or not an HTTP error). Callers
        #: branch on it, never on the message: the message quotes URLs and names that may
        #: contain any digits (a port 40412 is no "404").
        self.status = status
        super().__init__(f"{cloud}: {operation}: {message}")


class CredentialsError(GpuleaseError):
    """A command that calls a cloud found no credentials for it (exit 2: nothing was called).
    The message says what to set (``gpulease.credentials``)."""

    exit_code = EXIT_BAD_INPUT


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """' (did you mean "x"?)' for the closest valid choice, or '' when nothing is close."""
    import difflib

    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if value.lower() in lowered and lowered[value.lower()] != value:
        return f' (did you mean "{lowered[value.lower()]}"?)'
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    if not close:
        close = [lowered[m] for m in difflib.get_close_matches(value.lower(), list(lowered), n=1, cutoff=0.6)]
    return f' (did you mean "{close[0]}"?)' if close else ""
