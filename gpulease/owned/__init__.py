"""GPUs the organisation already owns (issue 32): their cost (:mod:`gpulease.owned.cost`)."""
