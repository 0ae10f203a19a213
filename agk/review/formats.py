"""The review in four forms: text for a terminal, JSON for scripts, SARIF 2.1.0 for code scanning,
markdown for a pull-request comment."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pulumi_policy import Policy, Severity

from agk.review.evaluate import Report, Violation
from agk.review.locate import key_line, stack_file_for

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/azure-gpu-k8s/azure-gpu-k8s#pull-request-review"
SECURITY_SEVERITY = {"critical": "9.5", "high": "8.0", "medium": "5.5", "low": "3.0", "": "5.5"}
"""GitHub code scanning ranks security results by this property (CVSS-like scale)."""


def _resource_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1] if urn else "(stack)"


def _counts(report: Report) -> tuple[int, int]:
    mandatory = len(report.mandatory)
    return mandatory, len(report.violations) - mandatory


def _ordered(report: Report) -> list[Violation]:
    return sorted(report.violations, key=lambda v: (v.stack, v.enforcement != "mandatory", v.policy, v.urn))


def text(report: Report) -> str:
    mandatory, advisory = _counts(report)
    lines = [
        f"agk review: {', '.join(report.stacks) or '(no stack)'}: {report.policies_run} policies, "
        f"{mandatory} mandatory and {advisory} advisory violation(s)"
    ]
    several = len({v.source for v in report.violations}) > 1
    for v in _ordered(report):
        where = f"  ({v.source})" if several else ""
        lines.append(f"  {v.enforcement.upper():<9} {v.policy}  [{v.stack}] {v.type} {_resource_name(v.urn)}{where}")
        lines.append(f"            {v.message}")
    lines.append(
        f"verdict: FAIL ({mandatory} mandatory violation(s))" if mandatory else "verdict: PASS (no mandatory violation)"
    )
    return "\n".join(lines) + "\n"


def as_json(report: Report) -> str:
    body = {
        "violations": [
            {
                "policy": v.policy,
                "enforcement": v.enforcement,
                "severity": v.severity,
                "urn": v.urn,
                "type": v.type,
                "message": v.message,
                "source": v.source,
                "key": v.key,
            }
            for v in _ordered(report)
        ],
        "policies_run": report.policies_run,
    }
    return json.dumps(body, indent=2) + "\n"


def _level(v: Violation) -> str:
    return "error" if v.enforcement == "mandatory" else "warning"


def sarif(report: Report, policies: Sequence[Policy], version: str, stacks_dir: Path | None = None) -> str:
    """SARIF 2.1.0: each result at the stack-file line of the key that made its resource (so code scanning
    shows it inline on the pull request), with a fingerprint that stays when only the message's figures do."""
    index = {p.name: i for i, p in enumerate(policies)}
    rules = [
        {
            "id": p.name,
            "name": "".join(part.capitalize() for part in p.name.split("-")),
            "shortDescription": {"text": p.description.split(": ")[0].rstrip(".")},
            "fullDescription": {"text": p.description},
            "help": {"text": p.description},
            "defaultConfiguration": {
                "level": "warning" if (p.enforcement_level and p.enforcement_level.value == "advisory") else "error"
            },
            "properties": {
                "tags": ["security", "infrastructure", "pulumi-policy"],
                "security-severity": SECURITY_SEVERITY[p.severity.value if isinstance(p.severity, Severity) else ""],
            },
        }
        for p in policies
    ]
    results = []
    seen: dict[str, int] = {}
    for v in _ordered(report):
        # One finding per policy, resource and key; the message's figures (counts, sizes) may change between
        # runs without it becoming another finding. A repeat on the same triple gets its occurrence.
        triple = f"{v.policy}\0{v.urn}\0{v.key}"
        seen[triple] = seen.get(triple, 0) + 1
        fingerprint = hashlib.sha256(f"{triple}\0{seen[triple]}".encode()).hexdigest()
        stack_file = stack_file_for(v, stacks_dir)
        uri = str(stack_file) if stack_file is not None else v.source
        line = key_line(stack_file, v.key) if stack_file is not None and v.key else 1
        results.append(
            {
                "ruleId": v.policy,
                "ruleIndex": index[v.policy],
                "level": _level(v),
                "message": {"text": v.message},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": uri},
                            "region": {"startLine": line},
                        },
                        "logicalLocations": [
                            {"fullyQualifiedName": v.urn or v.stack, "name": _resource_name(v.urn), "kind": "resource"}
                        ],
                    }
                ],
                "partialFingerprints": {"agkViolation/v1": fingerprint},
                "properties": {
                    "enforcement": v.enforcement,
                    "severity": v.severity,
                    "resourceType": v.type,
                    "configKey": v.key,
                    "export": v.source,
                },
            }
        )
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "agk-review",
                        "informationUri": INFORMATION_URI,
                        "version": version,
                        "semanticVersion": version,
                        "rules": rules,
                    }
                },
                "automationDetails": {"id": f"agk-review/{'+'.join(report.stacks)}/"},
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(report: Report) -> str:
    mandatory, advisory = _counts(report)
    verdict = "❌ **fails**" if mandatory else "✅ **passes**"
    lines = [
        "### Policy review",
        "",
        f"{verdict}: {report.policies_run} policies over {', '.join(f'`{s}`' for s in report.stacks)}; "
        f"{mandatory} mandatory, {advisory} advisory violation(s).",
        "",
    ]
    per_stack = Counter((v.stack, v.enforcement) for v in report.violations)
    lines += ["| stack | mandatory | advisory |", "|---|---:|---:|"]
    lines += [f"| `{s}` | {per_stack[(s, 'mandatory')]} | {per_stack[(s, 'advisory')]} |" for s in report.stacks]
    if report.violations:
        lines += ["", "| level | policy | stack | resource | message |", "|---|---|---|---|---|"]
        for v in _ordered(report):
            icon = "❌ mandatory" if v.enforcement == "mandatory" else "⚠️ advisory"
            lines.append(
                f"| {icon} | `{v.policy}` | `{v.stack}` | `{_cell(v.type)}` `{_cell(_resource_name(v.urn))}` "
                f"| {_cell(v.message)} |"
            )
    return "\n".join(lines) + "\n"
