"""Reads what is already paid for on this cloud into inventory holdings
(:mod:`gpulease.inventory.model`). Work in progress (issue 32 item 3): the reader lands with
`gpulease inventory`."""
