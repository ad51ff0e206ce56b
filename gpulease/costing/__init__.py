"""Cost tagging: per-resource cost, the tag/label encoder, the stack-wide transform."""
