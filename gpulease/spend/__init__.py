"""Actual spend: read a cloud bill (FOCUS, CUR 2.0, GCP billing export), classify every row once
and reconcile it with the plan (issue 33; docs/spend.md).

- :mod:`gpulease.spend.sources` finds the bill's format and maps it, in SQL, onto one normalised
  row view (the one query every format goes through; DuckDB runs it, embedded);
- :mod:`gpulease.spend.classify` puts every row in exactly one class and checks that the classes
  add up to the source's total to the cent;
- :mod:`gpulease.spend.reconcile` sets the classified spend beside the plan, per cluster and
  shared resource, with the causes of each difference.
"""
