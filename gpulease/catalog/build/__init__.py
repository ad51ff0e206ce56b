"""Build scripts that turn public price datasets into the shipped catalog snapshot."""
