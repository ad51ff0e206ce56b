"""gpulease: cost-optimized hybrid GPU training clusters on AWS and GCP, declared with Pulumi."""
__version__ = "0.2.0"
