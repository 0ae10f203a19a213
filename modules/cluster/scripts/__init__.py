"""Stdlib-only scripts shipped to the cluster in ConfigMaps (run by python:*-slim images)."""
