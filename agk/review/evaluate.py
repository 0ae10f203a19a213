"""Running the pack's policies over one deployment, the way the analyzer server runs them.

Resource policies get each resource's inputs (``Analyze``), stack policies every resource with its
outputs, parent and dependencies (``AnalyzeStack``). A policy that touches an unknown value yields
the SDK's advisory "can't run policy ... during preview" instead of a verdict; a policy that calls
``not_applicable`` yields nothing; REMEDIATE counts as MANDATORY, DISABLED does not run.

Props go through the same path the analyzer's gRPC server uses: a protobuf ``Struct`` (so numbers
are floats, as policies see them under `pulumi preview`), ``deserialize_properties`` and the SDK's
``unknown_checking_proxy``. Encrypted secrets (an export without ``--show-secrets``) become the
text ``[secret]``: the engine would know them, a file does not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from inspect import isawaitable
from typing import Any

from google.protobuf import json_format, struct_pb2
from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyCustomTimeouts,
    PolicyProviderResource,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY, deserialize_properties
from pulumi_policy.policy import _NotApplicableError
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

from agk.review.config import Settings
from agk.stack_export import STACK_TYPE, Deployment, Exported


def _reveal(value: Any) -> Any:
    if isinstance(value, list):
        return [_reveal(v) for v in value]
    if isinstance(value, dict):
        if value.get(SPECIAL_SIG_KEY) == SPECIAL_SECRET_SIG:
            if "plaintext" in value:
                try:
                    return _reveal(json.loads(value["plaintext"]))
                except (TypeError, json.JSONDecodeError):
                    return value["plaintext"]
            if "value" in value:
                return _reveal(value["value"])
            return "[secret]"
        return {k: _reveal(v) for k, v in value.items()}
    return value


def wire_props(props: Mapping[str, Any]) -> Any:
    """Props exactly as the analyzer hands them to a policy."""
    struct = struct_pb2.Struct()
    struct.update(_reveal(dict(props)))
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct)))


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: str
    severity: str
    urn: str
    type: str
    message: str
    stack: str
    source: str
    key: str = ""
    """The stack-file key whose value made the resource (agk.review.locate), for locating the finding."""


@dataclass(frozen=True)
class Report:
    violations: list[Violation]
    policies_run: int
    stacks: list[str]

    @property
    def mandatory(self) -> list[Violation]:
        return [v for v in self.violations if v.enforcement == EnforcementLevel.MANDATORY.value]


def _options(res: Exported) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=res.protect,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
        parent=res.parent,
    )


def _providers(dep: Deployment) -> dict[str, PolicyProviderResource]:
    out = {}
    for res in dep.resources:
        if res.type.startswith("pulumi:providers:"):
            out[res.urn] = PolicyProviderResource(res.type, wire_props(res.inputs), res.urn, res.name)
    return out


def _provider(res: Exported, providers: dict[str, PolicyProviderResource]) -> PolicyProviderResource | None:
    if not res.provider:
        return None
    return providers.get(res.provider.rsplit("::", 1)[0])


def _run(policy: ResourceValidationPolicy | StackValidationPolicy, args: Any, report: Callable[..., None]) -> None:
    result = policy.validate(args, report)
    if result is not None and isawaitable(result):
        asyncio.run(_await(result))


async def _await(result: Awaitable[Any]) -> None:
    await result


def evaluate(
    policies: Sequence[Policy], settings: dict[str, Settings], dep: Deployment, pack: str, version: str
) -> Report:
    providers = _providers(dep)
    root = next((r for r in dep.resources if r.type == STACK_TYPE), None)
    types = {r.urn: r.type for r in dep.resources}
    violations: list[Violation] = []
    running = [p for p in policies if settings[p.name].level != EnforcementLevel.DISABLED]

    def reporter(policy: Policy, level: EnforcementLevel, default_urn: str, fixed: bool = False) -> Callable[..., None]:
        shown = EnforcementLevel.MANDATORY if level == EnforcementLevel.REMEDIATE else level

        def report(message: str, urn: str | None = None) -> None:
            target = default_urn if fixed else (urn or default_urn)
            violations.append(
                Violation(
                    policy=policy.name,
                    enforcement=shown.value,
                    severity=policy.severity.value if policy.severity else "",
                    urn=target,
                    type=types.get(target, STACK_TYPE),
                    message=message or policy.description,
                    stack=dep.stack,
                    source=dep.source,
                )
            )

        return report

    def unknown(policy: Policy, err: UnknownValueError, urn: str) -> None:
        violations.append(
            Violation(
                policy=policy.name,
                enforcement=EnforcementLevel.ADVISORY.value,
                severity=policy.severity.value if policy.severity else "",
                urn=urn,
                type=types.get(urn, STACK_TYPE),
                message=f"can't run policy '{policy.name}' from policy pack '{pack}@v{version}' during preview: "
                f"{err.message}",
                stack=dep.stack,
                source=dep.source,
            )
        )

    # Each resource is serialised once, as the analyzer does per request, and every policy reads
    # the same read-only proxies: per policy, the conversion cost more than the rules themselves.
    resource_args: list[tuple[Exported, Any, PolicyProviderResource | None, PolicyResourceOptions]] = []
    if any(isinstance(p, ResourceValidationPolicy) for p in running):
        resource_args = [
            (res, wire_props(res.inputs), _provider(res, providers), _options(res)) for res in dep.resources
        ]
    stack_resources = (
        _stack_resources(dep, providers) if any(isinstance(p, StackValidationPolicy) for p in running) else []
    )
    for policy in running:
        level = settings[policy.name].level
        config = settings[policy.name].config or None
        if isinstance(policy, ResourceValidationPolicy):
            for res, props, provider, options in resource_args:
                args = ResourceValidationArgs(
                    res.type, props, res.urn, res.name, options, provider, dict(config) if config else None
                )
                # Resource policies report against the resource itself: the SDK ignores their urn argument.
                report = reporter(policy, level, res.urn, fixed=True)
                try:
                    _run(policy, args, report)
                except UnknownValueError as err:
                    unknown(policy, err, res.urn)
                except _NotApplicableError:
                    pass
        elif isinstance(policy, StackValidationPolicy):
            args_stack = StackValidationArgs(stack_resources, dict(config) if config else None)
            try:
                _run(policy, args_stack, reporter(policy, level, root.urn if root else ""))
            except UnknownValueError as err:
                unknown(policy, err, root.urn if root else "")
            except _NotApplicableError:
                pass
    return Report(violations=violations, policies_run=len(running), stacks=[dep.stack])


def _stack_resources(dep: Deployment, providers: dict[str, PolicyProviderResource]) -> list[PolicyResource]:
    built: dict[str, PolicyResource] = {}
    for res in dep.resources:
        props = res.outputs if res.outputs else res.inputs
        built[res.urn] = PolicyResource(
            res.type, wire_props(props), res.urn, res.name, _options(res), _provider(res, providers), None, [], {}
        )
    for res in dep.resources:
        node = built[res.urn]
        node.parent = built.get(res.parent) if res.parent else None
        node.dependencies = [built[d] for d in res.dependencies if d in built]
        node.property_dependencies = {
            k: [built[d] for d in v if d in built] for k, v in res.property_dependencies.items()
        }
    return list(built.values())
