"""A resource monitor that records the whole graph the way the Pulumi engine would.

Pulumi's own ``MockMonitor`` keeps only URN, id and outputs, forms nested URNs from the last
parent type only and hands mocks deserialized inputs (secrets unwrapped). This monitor keeps
what ``pulumi stack export`` shows: URNs with the full parent type chain (the root stack's type
left out, as the engine does), parent, dependencies, property dependencies, provider references
(default providers created on first use, named ``default_<version>``), inputs and outputs in
wire form with secrets still tagged, and component outputs from ``RegisterResourceOutputs``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import empty_pb2
from pulumi.runtime.mocks import MockMonitor, MockResourceArgs, Mocks
from pulumi.runtime.proto import resource_pb2

from agk.plan import wire
from agk.plan.cloud import SUBSCRIPTION, TENANT, Cloud, stable_uuid

STACK_TYPE = "pulumi:pulumi:Stack"
STACK_REFERENCE = "pulumi:pulumi:StackReference"


@dataclass
class Captured:
    """One resource as the engine would record it (values in wire form)."""

    urn: str
    type: str
    custom: bool
    id: str | None = None
    parent: str | None = None
    provider: str | None = None
    dependencies: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    external: bool = False
    protect: bool = False
    delete_before_replace: bool = False
    """The registration's ``deleteBeforeReplace``: a replacement deletes the old resource first."""
    replace_on_changes: list[str] = field(default_factory=list)
    """The registration's ``replaceOnChanges``: input paths whose change replaces the resource."""
    order: int = 0
    aliases: list[str] = field(default_factory=list)
    """URNs this resource was known by (the program's ``aliases``), as the engine matches them."""

    @property
    def name(self) -> str:
        return self.urn.split("::", 3)[3]


def make_urn(stack: str, project: str, parent: str, type_: str, name: str) -> str:
    if parent:
        parent_type = parent.split("::", 3)[2]
        if parent_type != STACK_TYPE:
            type_ = f"{parent_type}${type_}"
    return f"urn:pulumi:{stack}::{project}::{type_}::{name}"


_API_VERSION_TYPE = re.compile(r"^[a-z0-9-]+:[A-Za-z0-9]+/v[0-9]{8}[a-z0-9]*:")
"""azure-native's SDK aliases every type to its API-version tokens (``azure-native:network/v20230201:Subnet``)."""


def alias_urns(request: Any, stack: str, project: str) -> list[str]:
    """The URNs a registration's aliases stand for; the provider SDK's API-version type aliases are left out."""
    own = make_urn(stack, project, request.parent, request.type, request.name)
    out = [a for a in request.aliasURNs if a != own]
    for alias in request.aliases:
        if alias.WhichOneof("alias") == "urn":
            out.append(alias.urn)
            continue
        spec = alias.spec
        if spec.type and _API_VERSION_TYPE.match(spec.type) and not spec.name and not spec.parentUrn:
            continue
        parent = "" if spec.noParent else (spec.parentUrn or request.parent)
        urn = make_urn(
            spec.stack or stack, spec.project or project, parent, spec.type or request.type, spec.name or request.name
        )
        if urn != own:
            out.append(urn)
    return sorted(set(out))


def default_provider_name(version: str) -> str:
    return "default" if not version else "default_" + re.sub(r"[^A-Za-z0-9]", "_", version)


class _NoMocks(Mocks):
    """Never called: this monitor answers every request itself."""

    def call(self, args: Any) -> tuple[dict[str, Any], None]:  # pragma: no cover
        return {}, None

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:  # pragma: no cover
        return "", {}


StackResolver = Callable[[str], tuple[dict[str, Any], list[str]]]
"""Stack reference name -> (that stack's outputs, the names of its secret outputs)."""


LastOutputs = Callable[[str], dict[str, Any]]
"""Stack name -> its last deployed outputs in plain form (``--base``), or ``{}`` when never deployed."""


class CaptureMonitor(MockMonitor):
    def __init__(
        self,
        stack: str,
        project: str,
        config: dict[str, str],
        resolve_stack: StackResolver,
        last_outputs: LastOutputs | None = None,
    ) -> None:
        super().__init__(_NoMocks())
        self.stack = stack
        self.project = project
        self.config = config
        self.resolve_stack = resolve_stack
        self.last_outputs = last_outputs
        self.cloud = Cloud()
        self.captured: dict[str, Captured] = {}
        self.references: list[str] = []
        self._lock = threading.Lock()
        self._order = 0

    # -- recording ---------------------------------------------------------------------------
    def _record(self, res: Captured) -> Captured:
        with self._lock:
            self._order += 1
            res.order = self._order
            self.captured[res.urn] = res
        return res

    def _default_provider(self, type_: str, version: str) -> str:
        package = type_.split(":", 1)[0]
        name = "default" if package == "pulumi" else default_provider_name(version)
        urn = make_urn(self.stack, self.project, "", f"pulumi:providers:{package}", name)
        with self._lock:
            existing = self.captured.get(urn)
        if existing is None:
            # A default provider's inputs are the stack config of its package, and its version.
            inputs: dict[str, Any] = {
                k.split(":", 1)[1]: v for k, v in sorted(self.config.items()) if k.startswith(f"{package}:")
            }
            if version:
                inputs["version"] = version
            existing = self._record(
                Captured(urn, f"pulumi:providers:{package}", True, stable_uuid(urn), None, None, [], {}, inputs, inputs)
            )
        return f"{urn}::{existing.id}"

    def _provider_ref(self, type_: str, custom: bool, provider: str, version: str) -> str | None:
        if not custom or type_.startswith("pulumi:providers:"):
            return provider or None
        return provider or self._default_provider(type_, version)

    # -- the monitor's RPCs ------------------------------------------------------------------
    def RegisterResource(self, request: Any) -> Any:
        urn = make_urn(self.stack, self.project, request.parent, request.type, request.name)
        if request.type == STACK_TYPE:
            self._record(Captured(urn, STACK_TYPE, False))
            return resource_pb2.RegisterResourceResponse(urn=urn)
        inputs = wire.from_struct(request.object)
        provider = self._provider_ref(request.type, request.custom, request.provider, request.version)
        res = Captured(
            urn=urn,
            type=request.type,
            custom=bool(request.custom),
            parent=request.parent or None,
            provider=provider,
            dependencies=list(dict.fromkeys(request.dependencies)),
            property_dependencies={k: list(v.urns) for k, v in sorted(request.propertyDependencies.items())},
            inputs=inputs,
            protect=bool(request.protect),
            delete_before_replace=bool(request.deleteBeforeReplace),
            replace_on_changes=list(request.replaceOnChanges),
            aliases=alias_urns(request, self.stack, self.project),
        )
        if not request.custom:
            self._record(res)
            return resource_pb2.RegisterResourceResponse(urn=urn)
        id_, outputs = self.cloud.create(request.type, request.name, urn, inputs)
        for key in request.additionalSecretOutputs:
            if key in outputs and not wire.is_secret(outputs[key]):
                outputs[key] = wire.secret(outputs[key])
        res.id, res.outputs = id_, outputs
        self._record(res)
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_, object=wire.to_struct(outputs))

    def ReadResource(self, request: Any) -> Any:
        urn = make_urn(self.stack, self.project, request.parent, request.type, request.name)
        inputs = wire.from_struct(request.properties)
        if request.type == STACK_REFERENCE:
            name = str(wire.plain(inputs.get("name") or request.id))
            exported, secret_names = self.resolve_stack(name)
            with self._lock:
                self.references.append(name)
            outputs = {
                "name": name,
                "outputs": {k: wire.secret(v) if k in secret_names else v for k, v in exported.items()},
                "secretOutputNames": sorted(secret_names),
            }
        else:
            outputs = dict(inputs)
        res = Captured(
            urn=urn,
            type=request.type,
            custom=True,
            id=request.id,
            parent=request.parent or None,
            provider=self._provider_ref(request.type, True, request.provider, request.version),
            dependencies=list(dict.fromkeys(request.dependencies)),
            inputs=inputs,
            outputs=outputs,
            external=True,
        )
        self._record(res)
        return resource_pb2.ReadResourceResponse(urn=urn, properties=wire.to_struct(outputs))

    def RegisterResourceOutputs(self, request: Any) -> Any:
        outputs = wire.from_struct(request.outputs)
        with self._lock:
            res = self.captured.get(request.urn)
            if res is not None:
                res.outputs = outputs
        return empty_pb2.Empty()

    def Invoke(self, request: Any) -> Any:
        if request.tok == "azure-native:authorization:getClientConfig":
            answer = {
                "clientId": stable_uuid("client"),
                "objectId": stable_uuid("object"),
                "subscriptionId": SUBSCRIPTION,
                "tenantId": TENANT,
            }
            return _invoke_response(answer)
        if request.tok == "pulumi:pulumi:readStackOutputs":
            # A stack reading outputs synchronously (StackReference's sync path; the program reads its own
            # last outputs this way). Its own: the base's, when there is one; another stack: planned now.
            name = str(wire.from_struct(request.args).get("name"))
            if name.rsplit("/", 1)[-1] == self.stack:
                outputs = self.last_outputs(self.stack) if self.last_outputs is not None else {}
                return _invoke_response({"name": name, "outputs": outputs, "secretOutputNames": []})
            values, secret = self.resolve_stack(name)
            return _invoke_response({"name": name, "outputs": values, "secretOutputNames": secret})
        if request.tok == "pulumi:pulumi:getResource":
            urn = str(wire.from_struct(request.args).get("urn"))
            with self._lock:
                found = self.captured.get(urn)
            if found is None:
                raise KeyError(f"unknown resource {urn}")
            found_answer: dict[str, Any] = {"urn": found.urn, "id": found.id or "", "state": found.outputs}
            return _invoke_response(found_answer)
        return _invoke_response({})


def _invoke_response(answer: dict[str, Any]) -> Any:
    response = resource_pb2.ResourceInvokeResponse()
    # `return` is a Python keyword, so the field is reached by name.
    getattr(response, "return").CopyFrom(wire.to_struct(answer))
    return response
