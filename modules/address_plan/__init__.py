"""Address planning: subnet sizes, layouts and Azure limits (pure: imports no Pulumi)."""
