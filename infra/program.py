"""What each kind of stack builds: the composition behind infra/__main__.py.

Everything is validated and planned (config, address plan, sizes, scale sets) before the first
resource is constructed, so bad input never leaves a half-built graph. Each kind of stack has its own
program (``<kind>_stack.py``); this reads the config and picks it.
"""

from __future__ import annotations

from typing import Any

import pulumi

from infra.addons_stack import build as build_addons
from infra.cluster_stack import build as build_cluster
from infra.hub_stack import build as build_hub
from infra.images_stack import build as build_images
from modules.stackplan.addresses import deployed_subnets, plan_stack
from modules.stackplan.config import AddonsStack, HubStack, ImagesStack, StackConfig, parse_config
from modules.stackplan.pools import deployed_large_pools, deployed_scale_sets
from modules.stackplan.prepare import prepare_cluster
from modules.stackplan.stacks_dir import stacks_dir


def runtime_config() -> dict[str, Any]:
    """Every config key Pulumi hands this program (the engine's settings, else PULUMI_CONFIG)."""
    from pulumi.runtime import config as runtime

    return {**runtime.get_config_env(), **runtime.CONFIG.get()}


def load() -> tuple[str, StackConfig]:
    stack = pulumi.get_stack()
    return stack, parse_config(runtime_config())


def last_outputs(stack: str) -> dict[str, Any]:
    """This stack's own last outputs (where its subnets are, how its pools are split into scale sets), read
    through Pulumi's StackReference sync path (the builtin `pulumi:pulumi:readStackOutputs` invoke on its own
    fully qualified name), before any resource exists. Before the first deploy there are none; a backend
    that cannot answer gets a warning and only the pins the stack file declares."""
    name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}"
    try:
        result = pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": name})
    except Exception as err:  # the SDK raises a bare Exception for an invoke's failures
        pulumi.log.warn(
            f"{stack}: cannot read its last outputs ({err}): only network.pinned holds subnets in place, and pools"
            " are split as if new"
        )
        return {}
    outputs = result.value.get("outputs") if isinstance(result.value, dict) else None
    return outputs if isinstance(outputs, dict) else {}


def build(stack: str, config: StackConfig) -> dict[str, Any]:
    """Validate and plan, then construct every resource of the stack; returns the outputs."""
    if isinstance(config, AddonsStack):
        return build_addons(config)
    if isinstance(config, ImagesStack):
        return build_images(stack, config)
    last = last_outputs(stack)
    if isinstance(config, HubStack):
        return build_hub(stack, config, plan_stack(stacks_dir(), stack, config, deployed_subnets(last)))
    return build_cluster(
        prepare_cluster(
            stack, config, stacks_dir(), deployed_subnets(last), deployed_scale_sets(last), deployed_large_pools(last)
        )
    )


def export(outputs: dict[str, Any]) -> None:
    for key, value in outputs.items():
        pulumi.export(key, value)
