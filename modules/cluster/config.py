"""Stack config for the in-cluster add-ons (owned by the cluster module)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class AddonsConfig(BaseModel):
    """Settings for the Kubernetes objects the cluster gets (teams, balloons, preflight, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
