"""Build tools: each regenerates a file gpulease ships (data or docs) from its sources; in the
repository and the sdist, never in the wheel (``python -m tools.<module>``, docs/development.md)."""
