"""The one bound on how long a test waits for anything: a guard against a hang, never a check
of speed (tests check behaviour; speed figures come from bench/).

It must exceed the slowest honest run on a loaded machine. On this project's 2-core build
machine with ~6 suites running at once (load average 12-21), single steps took: 222 s for the
cloud-init schema check of every rendered cloud-config (load 12), more than 600 s for the same
check and for docs/cli.md's block of ten `gpulease` commands (load 18-21), and more than 10 s
for a `moto-api/reset` (docs/measured.md). A hang is still caught, 30 minutes in, instead of
holding CI forever.
"""
from __future__ import annotations

#: seconds: subprocess.run(timeout=...), HTTP reads from local fakes and moto, Event.wait and
#: Thread.join in the tests and fakes. Never use a shorter literal: import this.
HANG_S = 1800.0
