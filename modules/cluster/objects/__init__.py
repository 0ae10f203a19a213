"""Pure builders: one dict per Kubernetes object, in the API server's wire form."""
