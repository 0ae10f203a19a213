"""The base of every stack-file section's model: unknown keys are errors, values are frozen.

One place, so every section answers the same way: a typo never silently does nothing, and YAML's
``yes``/``true`` is never taken as 1 for a number (pydantic would: a bool is an int to it).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

PROJECT = "azure-gpu-k8s"
"""The Pulumi project, and so the namespace of every key of ours in a stack file (``azure-gpu-k8s:<key>``)."""


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: object, info: ValidationInfo) -> object:
        annotation = cls.model_fields[info.field_name].annotation if info.field_name else None
        if isinstance(value, bool) and annotation in (int, int | None, int | str):
            raise ValueError(f"{str(value).lower()} is not a number: write a whole number")
        return value
