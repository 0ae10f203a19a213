"""The base of every stack-file section's model: unknown keys are errors, values are frozen.

One place, so every section answers the same way: a typo never silently does nothing, and YAML's
``yes``/``true`` is never taken as 1 for a number (pydantic would: a bool is an int to it), alone or in a
list or mapping of numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

PROJECT = "azure-gpu-k8s"
"""The Pulumi project, and so the namespace of every key of ours in a stack file (``azure-gpu-k8s:<key>``)."""

_NUMBERS = (int, int | None, int | str)


def _bools_for_numbers(annotation: Any, value: object) -> list[bool]:
    """The booleans ``value`` gives where ``annotation`` wants whole numbers (the value, or its items)."""
    if isinstance(value, bool):
        return [value] if annotation in _NUMBERS else []
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (list, tuple, set, frozenset) and args and args[0] is int and isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, bool)]
    if origin is dict and args[1:] == (int,) and isinstance(value, Mapping):
        return [v for v in value.values() if isinstance(v, bool)]
    return []


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: object, info: ValidationInfo) -> object:
        annotation = cls.model_fields[info.field_name].annotation if info.field_name else None
        found = _bools_for_numbers(annotation, value)
        if found:
            raise ValueError(f"{str(found[0]).lower()} is not a number: write a whole number")
        return value
