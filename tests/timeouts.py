"""The one bound on how long a test waits for anything: a guard against a hang, never a check
of speed (tests check behaviour; speed figures come from bench/).

It must exceed the slowest honest run on a loaded machine. On this project's 2-core build
machine with ~6 suites running at once (load average 18-25), a process gets ~1/10 of a core:
a step of 60 CPU-seconds takes ten minutes. Measured there: the cloud-init check of all 3,188
rendered cloud-configs (160 CPU-s, since cut to a few dozen documents) ran past 600 s and was
still at it after 25 min; docs/cli.md's block of ten `gpulease` commands ran past 600 s; a
`moto-api/reset` past 10 s (docs/development.md). An hour leaves room for twice that load and
still ends a real hang.
"""
from __future__ import annotations

#: seconds: subprocess.run(timeout=...), HTTP reads from local fakes and moto, Event.wait and
#: Thread.join in the tests and fakes. Never use a shorter literal: import this.
HANG_S = 3600.0
