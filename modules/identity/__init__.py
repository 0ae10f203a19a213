"""Who may use the cluster and what its pods may reach in Azure: researchers' sign-in (Microsoft Entra ID),
their RBAC, and workload identity (the service-account issuer Azure trusts, one identity per team). Pure."""
