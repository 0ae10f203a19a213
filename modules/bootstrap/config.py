"""Stack config for node bootstrap (owned by the bootstrap module)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BootstrapConfig(BaseModel):
    """Settings for what every node boots with (cloud-init, etcd, API server, Prometheus)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
