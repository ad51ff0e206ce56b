"""Node bootstrap: renders cloud-init, scripts and agent configs from templates/bootstrap."""
