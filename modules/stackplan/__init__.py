"""Stack config to cluster plan (pure: imports no Pulumi): the typed config model, per-pool
counts, addresses, VM sizes, egress, prerequisites, and the bootstrap and add-on specs. The Pulumi program
(infra/), `agk` and `subnet-calc` all call this package; components only turn its plan into resources."""
