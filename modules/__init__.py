"""Reusable Pulumi components and the pure planners they are built from."""
