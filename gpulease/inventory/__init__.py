"""What the organisation already paid for (issue 32): the inventory file's schema
(:mod:`gpulease.inventory.model`) and one reader per cloud (``gpulease/inventory/<cloud>.py``,
named by ``Cloud.inventory_module``) behind `gpulease inventory`."""
