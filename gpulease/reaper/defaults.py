"""The reaper's defaults and limits, as plain constants (no pydantic, no decision rules):
`gpulease reap --help` shows them without importing the reaper. ``ReaperSettings`` (the stack's
``gpulease:reaper``) and the decision rules use these."""

#: GPU utilization (percent) below which a node is idle.
THRESHOLD_PCT = 5.0
#: minutes to wait after marking before acting.
GRACE_MINUTES = 30
#: most clusters acted on per run, shared with reapers running at the same time.
MAX_ACTIONS = 10
#: the longest grace period accepted (7 days), for the same reason as ``MAX_IDLE_MINUTES``: a
#: mark is re-checked against the data since it was set.
MAX_GRACE_MINUTES = 7 * 24 * 60
