"""Limits several parts of gpulease share (config, bootstrap, reaper), as plain constants: the
CLI's help screens show them without importing the models that enforce them."""

#: Longest idle window a cluster may ask for (one week): the config rejects more, and the reaper
#: treats a larger `gpulease-idle-minutes` tag value as invalid.
MAX_IDLE_MINUTES = 7 * 24 * 60
