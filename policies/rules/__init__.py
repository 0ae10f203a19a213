"""Rule functions of the azure-gpu-k8s policy pack, one plain function per rule, importable without
starting the pack's gRPC server (only ``policies/__main__.py`` constructs ``PolicyPack``)."""
