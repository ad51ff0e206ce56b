"""AWS: the Pulumi components, pure builders and deployment of the AWS part of a plan."""
