"""GCP: the Pulumi components, pure builders and deployment of the GCP part of a plan."""
