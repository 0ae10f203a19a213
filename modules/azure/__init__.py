"""Pulumi components that turn the address plan and sizing into Azure resources."""
