"""Pure sizing rules: VM SKUs and recommended sizes per role (no pulumi import)."""
