"""Guardrails: policy-as-code rules shared by `gpulease plan` and the CrossGuard pack."""
