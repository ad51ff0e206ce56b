"""gpulease: cost-optimized hybrid GPU training clusters on AWS and GCP, declared with Pulumi."""
__version__ = "0.1.0"
