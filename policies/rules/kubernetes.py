"""Kubernetes rules: balloons that the autoscaler still counts, bounded containers, and host-level
privileges only where someone wrote down why."""

from __future__ import annotations

from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, StackValidationArgs

from modules import tags
from policies.rules import fields

JUSTIFICATION = tags.JUSTIFICATION
"""Annotation that must explain why a workload runs privileged or on the host network."""

BALLOON_MIN, BALLOON_MAX = -10, -1
"""cluster-autoscaler's expendable cutoff is -10: a pod below it neither triggers scale-up nor blocks
scale-down, so a balloon there reserves nothing. At 0 it ties with ordinary pods, which then cannot
preempt it (preemption needs a strictly higher priority)."""

PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
_POD_SPECS = {
    "kubernetes:core/v1:Pod": "spec",
    "kubernetes:apps/v1:Deployment": "spec.template.spec",
    "kubernetes:apps/v1:DaemonSet": "spec.template.spec",
    "kubernetes:apps/v1:StatefulSet": "spec.template.spec",
    "kubernetes:apps/v1:ReplicaSet": "spec.template.spec",
    "kubernetes:batch/v1:Job": "spec.template.spec",
    "kubernetes:batch/v1:CronJob": "spec.jobTemplate.spec.template.spec",
}


def pod_spec(resource_type: str, props: Any) -> Any:
    path = _POD_SPECS.get(resource_type)
    return fields.get(props, path) if path else None


def _kind_name(resource_type: str, props: Any, fallback: str) -> str:
    return f"{resource_type.rsplit(':', 1)[-1]} {fields.get(props, 'metadata.name', fallback)}"


def _is_balloon(props: Any) -> bool:
    labels = [fields.get(props, "metadata.name", "")]
    labels += list(fields.get(props, "metadata.labels", {}).values())
    labels += list(fields.get(props, "spec.template.metadata.labels", {}).values())
    return any("balloon" in str(text).lower() for text in labels)


def balloon_priority_range(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    config = args.get_config()
    low, high = int(config.get("min", BALLOON_MIN)), int(config.get("max", BALLOON_MAX))
    classes = {
        str(fields.get(r.props, "metadata.name", r.name)): r
        for r in args.resources
        if r.resource_type == PRIORITY_CLASS
    }
    checked: set[str] = set()
    for res in args.resources:
        spec = pod_spec(res.resource_type, res.props)
        if spec is None or not _is_balloon(res.props):
            continue
        name = fields.get(spec, "priorityClassName")
        if not isinstance(name, str):
            report_violation(
                f"balloon {_kind_name(res.resource_type, res.props, res.name)} has no priorityClassName: "
                f"give it a PriorityClass with a value from {low} to {high}",
                res.urn,
            )
            continue
        if name in classes:
            checked.add(name)
            _check_value(classes[name], low, high, report_violation)
    for name, cls in classes.items():
        if name not in checked and "balloon" in name.lower():
            _check_value(cls, low, high, report_violation)


def _check_value(cls: Any, low: int, high: int, report_violation: ReportViolation) -> None:
    value = fields.number(fields.get(cls.props, "value"))
    if value is None or not low <= value <= high:
        name = fields.get(cls.props, "metadata.name", cls.name)
        report_violation(
            f"balloon PriorityClass {name} has value {value}: use {low} to {high} (below {low} the "
            "autoscaler ignores the balloon; at 0 or above real pods cannot preempt it)",
            cls.urn,
        )


def container_limits(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        return
    what = _kind_name(args.resource_type, args.props, args.name)
    for field in ("initContainers", "containers"):
        for container in fields.items(spec, field):
            limits = fields.get(container, "resources.limits", {})
            if not fields.is_map(limits) or not len(limits):
                report_violation(
                    f"{what} container {fields.get(container, 'name', '?')} has no resource limits: "
                    "set resources.limits (cpu, memory)",
                    None,
                )


def privileged_needs_justification(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        return
    key = str(args.get_config().get("annotation", JUSTIFICATION))
    granted = [
        "hostNetwork" if fields.get(spec, "hostNetwork") is True else "",
        *(
            f"privileged container {fields.get(c, 'name', '?')}"
            for field in ("initContainers", "containers")
            for c in fields.items(spec, field)
            if fields.get(c, "securityContext.privileged") is True
        ),
    ]
    granted = [g for g in granted if g]
    if not granted:
        return
    template = "spec.template.metadata.annotations" if "template" in _POD_SPECS[args.resource_type] else ""
    notes = [
        fields.get(args.props, "metadata.annotations", {}),
        fields.get(args.props, template, {}) if template else {},
    ]
    if any(str(n.get(key, "")).strip() for n in notes if fields.is_map(n)):
        return
    report_violation(
        f"{_kind_name(args.resource_type, args.props, args.name)} uses {', '.join(granted)} without a "
        f"{key} annotation: add one that says why it needs host access",
        None,
    )
