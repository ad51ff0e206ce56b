"""Fitting the pipelines teams already have (issue 36): a plan as a pull-request comment
(:mod:`gpulease.pipeline.markdown`) and the GitHub / GitLab calls that post it
(:mod:`gpulease.pipeline.comments`)."""
