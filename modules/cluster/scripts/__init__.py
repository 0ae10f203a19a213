"""Stdlib-only scripts shipped to the cluster in ConfigMaps (run by the MCR Python image, images.PYTHON)."""
