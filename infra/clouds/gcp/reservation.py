"""Pickle alias for Pulumi state written before gpulease 0.2.0 - not part of the program.

Until 0.2.0 the toolkit's import package was ``infra``. Pulumi stores a dynamic resource's
provider in the stack's state as a pickle that names its class by module path, so every GCE
reservation deployed before 0.2.0 holds ``infra.clouds.gcp.reservation.ReservationProvider``,
and `pulumi refresh` / `destroy` (and the first `up` after upgrading, which diffs against that
state) unpickle it from there in the dynamic-provider host. This module answers that name with
today's class. It is a namespace portion (no ``__init__.py`` above it), so it merges with a
user's own ``infra/`` folder instead of hiding it; the wheel installs only this file at the top
level. A reservation created or updated by 0.2.x stores ``gpulease.clouds.gcp.reservation``;
one untouched since 0.1 keeps the old name in its outputs. Drop this file in gpulease 0.3.0
(tests/test_legacy_state.py, docs/deploy.md "Upgrading from 0.1" says what to do first).
"""
from gpulease.clouds.gcp.reservation import ReservationProvider  # noqa: F401
