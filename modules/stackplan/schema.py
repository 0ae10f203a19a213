"""Print the JSON Schema of the stack config (``make schema`` writes stacks/schema.json)."""

from __future__ import annotations

import json

from modules.stackplan.config import StackConfig


def schema() -> dict[str, object]:
    return StackConfig.model_json_schema()


if __name__ == "__main__":
    print(json.dumps(schema(), indent=2, sort_keys=True))
