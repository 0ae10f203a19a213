"""Print the JSON Schema of the stack config (``make schema`` writes stacks/schema.json)."""

from __future__ import annotations

import json

from pydantic.json_schema import models_json_schema

from modules.stackplan.config import STACK_KINDS


def schema() -> dict[str, object]:
    # One model per kind, picked by `kind` (OpenAPI's discriminator): editors offer the sections of the file's kind.
    refs, defs = models_json_schema([(model, "validation") for model in STACK_KINDS.values()])
    mapping = {kind: refs[(model, "validation")]["$ref"] for kind, model in STACK_KINDS.items()}
    return {
        "title": "StackConfig",
        "description": "Everything under the azure-gpu-k8s: namespace of one stack file; `kind` picks its sections.",
        "oneOf": [{"$ref": ref} for ref in mapping.values()],
        "discriminator": {"propertyName": "kind", "mapping": mapping},
        **defs,
    }


if __name__ == "__main__":
    print(json.dumps(schema(), indent=2, sort_keys=True))
