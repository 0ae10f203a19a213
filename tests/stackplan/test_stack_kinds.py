"""One config type per kind of stack (modules/stackplan/config.py): a stack file's `kind` picks the sections it
may have, each required one is there once it parses, and a section of another kind is named with the fix."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

from modules.errors import ConfigError
from modules.stackplan.config import (
    STACK_KINDS,
    AddonsStack,
    ClusterStack,
    HubConfig,
    HubStack,
    ImagesStack,
    parse_config,
    stack_names,
)
from modules.stackplan.schema import schema
from tests.infra.conftest import STACKS

P = "azure-gpu-k8s"


def _raw(stack: str, **changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]
    for key, value in changes.items():
        raw[f"{P}:{key}"] = value
    return raw


@pytest.mark.parametrize(
    ("stack", "kind"),
    [("hub", HubStack), ("dev", ClusterStack), ("prod-7500", ClusterStack), ("dev-addons", AddonsStack),
     ("images", ImagesStack)],
)  # fmt: skip
def test_each_shipped_stack_parses_as_its_kind(stack: str, kind: type) -> None:
    assert type(parse_config(_raw(stack))) is kind


def test_a_hub_without_a_hub_section_gets_its_defaults() -> None:
    raw = _raw("hub")
    del raw[f"{P}:hub"]
    config = parse_config(raw)
    assert isinstance(config, HubStack) and config.hub == HubConfig()


CASES = [
    ("hub", {"cluster": {}}, "a hub stack has no 'cluster' section: remove it or set kind: cluster"),
    ("hub", {"alerting": {}}, "a hub stack has no 'alerting' section: alerts are a cluster stack's"),
    ("hub", {"addons": {}}, "a hub stack has no 'addons' section: a cluster's add-ons are set in its cluster stack"),
    ("dev", {"hub": {}}, "a cluster stack has no 'hub' section: remove it or set kind: hub"),
    ("dev", {"image_build": {}}, "a cluster stack has no 'image_build' section: node images are an images stack's"),
    ("dev-addons", {"location": "eastus2"}, "an addons stack has no 'location' section: it reads the cluster stack's outputs"),
    ("dev-addons", {"image_build": {}}, "an addons stack has no 'image_build' section: node images are an images stack's"),
    ("images", {"network": {}}, "an images stack has no 'network' section: it builds node images only"),
    ("images", {"limits": {}}, "an images stack has no 'limits' section: it builds node images only"),
    ("images", {"cluster": {}}, "an images stack has no 'cluster' section: it builds node images only"),
    ("hub", {"bootstrap": {"etcd": {"rtt_ms": 50}}}, "a hub stack has no 'bootstrap' section: how hosts boot is set in "
     "a cluster stack's component sections (cluster.etcd, cluster.api_servers, ...)"),
    ("dev", {"kind": "spoke"}, f"{P}:kind: 'spoke' is not allowed: use 'hub', 'cluster', 'addons' or 'images'"),
]  # fmt: skip


@pytest.mark.parametrize(("stack", "changes", "message"), CASES, ids=[f"{s}-{next(iter(c))}" for s, c, _ in CASES])
def test_a_section_of_another_kind_is_one_line_naming_it(stack: str, changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_raw(stack, **changes))
    assert str(err.value) == message


@pytest.mark.parametrize(("stack", "section"), [("dev", "cluster"), ("dev", "network"), ("hub", "network"),
                                                ("images", "image_build"), ("dev-addons", "addons_stack")])  # fmt: skip
def test_a_required_section_missing_is_named_with_the_kind(stack: str, section: str) -> None:
    raw = _raw(stack)
    kind = raw[f"{P}:kind"]
    del raw[f"{P}:{section}"]
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value) == f"kind is {kind} but {P}:{section} is missing: add it to the stack config"


def test_no_kind_is_one_line() -> None:
    raw = _raw("dev")
    del raw[f"{P}:kind"]
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value) == f"{P}:kind: missing: add it to the stack config ('hub', 'cluster', 'addons' or 'images')"


def test_a_bool_for_a_number_is_refused_in_every_section() -> None:
    # YAML reads `yes` as true; pydantic takes true as 1 for an int. Before every section shared one base
    # model, only the stack plan's refused it: cluster.etcd's tuning (from the bootstrap) took it as 1 ms.
    with pytest.raises(ConfigError) as err:
        parse_config(_raw("dev", cluster={**_raw("dev")[f"{P}:cluster"], "etcd": {"rtt_ms": True}}))
    assert str(err.value) == f"{P}:cluster.etcd.rtt_ms: true is not a number: write a whole number"
    with pytest.raises(ConfigError) as err:
        parse_config(_raw("dev", addons={"gang": {"replicas": True}}))
    assert str(err.value) == f"{P}:addons.gang.replicas: true is not a number: write a whole number"
    # In a list or a mapping of numbers too: an XID list [true, 48] would watch XID 1.
    with pytest.raises(ConfigError) as err:
        parse_config(_raw("dev", addons={"health": {"fatal_xids": [48, True]}}))
    assert str(err.value) == f"{P}:addons.health.fatal_xids: true is not a number: write a whole number"
    node_images = {**_raw("dev")[f"{P}:cluster"].get("node_images", {}), "roles": {"gpu-node": True}}
    with pytest.raises(ConfigError) as err:
        parse_config(_raw("dev", cluster={**_raw("dev")[f"{P}:cluster"], "node_images": node_images}))
    assert str(err.value) == f"{P}:cluster.node_images.roles: true is not a number: write a whole number"


def _stack_file_schema() -> dict[str, Any]:
    return json.loads((STACKS / "schema.json").read_text())


def _ours(stack: str) -> dict[str, Any]:
    """A stack file's keys as the schema describes them (without the namespace)."""
    return {k.split(":", 1)[1]: v for k, v in _raw(stack).items() if k.startswith(f"{P}:")}


@pytest.mark.parametrize("stack", stack_names(STACKS))
def test_the_editors_schema_takes_every_shipped_stack_file(stack: str) -> None:
    jsonschema.validate(_ours(stack), _stack_file_schema())


def test_the_editors_schema_refuses_a_section_of_another_kind() -> None:
    # The schema is one model per kind, chosen by `kind` (its discriminator): an editor flags a hub file's
    # `cluster` section as the program does, where one model with every section optional let it pass.
    hub = {**_ours("hub"), "cluster": _ours("dev")["cluster"]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(hub, _stack_file_schema())
    assert sorted(_stack_file_schema()["discriminator"]["mapping"]) == sorted(STACK_KINDS)
    assert _stack_file_schema() == json.loads(json.dumps(schema()))
