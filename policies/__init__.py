"""The azure-gpu-k8s CrossGuard policy pack: ``pulumi preview --policy-pack policies/`` runs it
against a deployment, ``agk review`` runs the same policies offline against a plan or an export."""
