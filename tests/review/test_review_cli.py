"""`agk review` end to end on export files: verdicts, exit status, formats, policy config, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from policy_fixtures import good_cluster

from agk.cli import app
from policies.pack import POLICIES

FIXTURES = Path(__file__).parent / "fixtures"
GOOD, BROKEN = FIXTURES / "good-stack.json", FIXTURES / "broken-stack.json"

BROKEN_RULES = {
    ("no-spoke-to-spoke-peering", "mandatory"),
    ("peered-vnets-no-overlap", "mandatory"),
    ("nsg-no-admin-ports-from-internet", "mandatory"),
    ("no-public-ip-on-cluster-hosts", "mandatory"),
    ("balloon-priority-range", "mandatory"),
    ("control-plane-member-count", "mandatory"),
    ("apiserver-memory-sizing", "advisory"),
}


def agk(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["review", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_committed_fixtures_match_their_generator() -> None:
    sys.path.insert(0, str(FIXTURES))
    import make_fixtures

    for path, data in ((GOOD, make_fixtures.good()), (BROKEN, make_fixtures.broken())):
        assert json.loads(path.read_text()) == data, f"{path.name} is stale: run tests/review/fixtures/make_fixtures.py"


def test_good_stack_passes() -> None:
    code, out, _ = agk("--file", str(GOOD), "--format", "json")
    assert code == 0
    assert json.loads(out) == {"violations": [], "policies_run": len(POLICIES)}


def test_broken_stack_fails_with_exactly_the_expected_rules() -> None:
    code, out, _ = agk("--file", str(BROKEN), "--format", "json")
    body = json.loads(out)
    assert code == 1
    assert {(v["policy"], v["enforcement"]) for v in body["violations"]} == BROKEN_RULES
    assert len(body["violations"]) == 8
    for v in body["violations"]:
        # The contract's fields, and where each came from: its file (several --file) and its stack-file key.
        assert set(v) == {"policy", "enforcement", "severity", "urn", "type", "message", "source", "key"}
        assert v["urn"].startswith("urn:pulumi:dev::azure-gpu-k8s::")
    ssh = next(v for v in body["violations"] if v["policy"] == "nsg-no-admin-ports-from-internet")
    assert ssh == {
        "policy": "nsg-no-admin-ports-from-internet",
        "enforcement": "mandatory",
        "severity": "critical",
        "urn": "urn:pulumi:dev::azure-gpu-k8s::azure-native:network:NetworkSecurityGroup::nsg-dev",
        "type": "azure-native:network:NetworkSecurityGroup",
        "message": "NSG nsg-dev rule ssh-anywhere allows inbound from * to port(s) 22: allow only the hub or VNet ranges",
        "source": str(BROKEN),
        "key": "azure-gpu-k8s:network",
    }


def test_text_states_the_verdict() -> None:
    code, out, _ = agk("--file", str(BROKEN))
    assert code == 1
    assert out.splitlines()[0] == f"agk review: dev: {len(POLICIES)} policies, 7 mandatory and 1 advisory violation(s)"
    assert out.splitlines()[-1] == "verdict: FAIL (7 mandatory violation(s))"


def test_sarif_carries_every_required_field() -> None:
    code, out, _ = agk("--file", str(BROKEN), "--format", "sarif")
    assert code == 1
    log = json.loads(out)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] and driver["version"]
    rules = driver["rules"]
    assert [r["id"] for r in rules] == [p.name for p in POLICIES]
    for rule in rules:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning")
        assert float(rule["properties"]["security-severity"]) > 0
    assert len(run["results"]) == 8
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["level"] == ("warning" if result["ruleId"] == "apiserver-memory-sizing" else "error")
        assert result["message"]["text"]
        (location,) = result["locations"]
        # The export is of stack dev: results point into its stack file (where a pull request changes keys),
        # and name the export they were found in.
        assert location["physicalLocation"]["artifactLocation"]["uri"] == "stacks/Pulumi.dev.yaml"
        assert result["properties"]["export"] == str(BROKEN)
        assert location["physicalLocation"]["region"]["startLine"] >= 1
        assert location["logicalLocations"][0]["fullyQualifiedName"].startswith("urn:pulumi:dev::")
        assert len(result["partialFingerprints"]["agkViolation/v1"]) == 64


def test_markdown_is_a_pr_comment() -> None:
    code, out, _ = agk("--file", str(BROKEN), "--format", "markdown")
    assert code == 1
    assert out.startswith(
        f"### Policy review\n\n❌ **fails**: {len(POLICIES)} policies over `dev`; 7 mandatory, 1 advisory"
    )
    assert "| ❌ mandatory | `nsg-no-admin-ports-from-internet` | `dev` |" in out


def _config(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "policy-config.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_policy_config_levels_and_properties(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        {
            "all": "advisory",
            "balloon-priority-range": {"enforcementLevel": "mandatory", "min": -2000},
            "control-plane-member-count": "disabled",
        },
    )
    code, out, _ = agk("--file", str(BROKEN), "--format", "json", "--policy-config", config)
    body = json.loads(out)
    assert body["policies_run"] == len(POLICIES) - 1  # one disabled
    levels = {(v["policy"], v["enforcement"]) for v in body["violations"]}
    assert ("control-plane-member-count", "mandatory") not in levels
    assert not any(p == "balloon-priority-range" for p, _ in levels)  # -1000 is within the configured range
    assert all(level == "advisory" for _, level in levels)
    assert code == 0


def test_remediate_counts_as_mandatory(tmp_path: Path) -> None:
    config = _config(tmp_path, {"apiserver-memory-sizing": "remediate"})
    _, out, _ = agk("--file", str(BROKEN), "--format", "json", "--policy-config", config)
    assert ("apiserver-memory-sizing", "mandatory") in {
        (v["policy"], v["enforcement"]) for v in json.loads(out)["violations"]
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"no-such-policy": "advisory"}, "error: policy config: unknown policy 'no-such-policy': use 'all' or one of"),
        (
            {"all": "loud"},
            "error: policy config: all: 'loud' is not an enforcement level: use one of advisory, "
            "mandatory, remediate, disabled",
        ),
        (
            {"required-tags": {"tags": "owner"}},
            "error: policy config: required-tags.tags: 'owner' is not of type "
            "'array': fix it to match the policy's config schema (properties: tags)",
        ),
        (
            {"subnet-has-nsg": {"strict": True}},
            "error: policy config: subnet-has-nsg.(properties): Additional "
            "properties are not allowed ('strict' was unexpected)",
        ),
    ],
)
def test_bad_policy_config_is_one_line_exit_2(tmp_path: Path, data: Any, message: str) -> None:
    code, out, err = agk("--file", str(GOOD), "--policy-config", _config(tmp_path, data))
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "error: --file {path}: no such file: give the path of a `pulumi stack export` JSON"),
        ("{nope", "error: --file {path}: not JSON (line 1: Expecting property name enclosed in double quotes)"),
        ('{"version": 2, "deployment": {}}', "error: --file {path}: version 2 is not supported: export with Pulumi 3"),
        (
            '{"version": 3, "deployment": {"resources": [{"urn": "x", "type": "t"}]}}',
            "error: --file {path}: deployment.resources[0]: urn 'x' is not a Pulumi URN",
        ),
    ],
)
def test_bad_export_is_one_line_exit_2(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "state.json"
    if content is not None:
        path.write_text(content)
    code, out, err = agk("--file", str(path))
    assert code == 2 and out == ""
    assert err.startswith(message.format(path=path)) and err.count("\n") == 1


def test_exactly_one_input() -> None:
    code, _, err = agk("--file", str(GOOD), "--all")
    assert code == 2
    assert err == "error: choose what to review: give exactly one of --stack NAME, --all or --file STATE.json\n"


def test_unknown_stack(tmp_path: Path) -> None:
    (tmp_path / "Pulumi.hub.yaml").write_text("config: {}\n")
    code, _, err = agk("--stack", "nope", "--stacks-dir", str(tmp_path))
    assert code == 2
    assert err == f"error: --stack nope: no {tmp_path}/Pulumi.nope.yaml: use one of hub\n"


def test_unknown_values_are_advisory_like_the_sdk(tmp_path: Path) -> None:
    st = good_cluster()
    st.inputs("stdev")["minimumTlsVersion"] = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    path = tmp_path / "preview.json"
    path.write_text(json.dumps(st.export()))
    code, out, _ = agk("--file", str(path), "--format", "json")
    assert code == 0
    (v,) = json.loads(out)["violations"]
    assert v["enforcement"] == "advisory" and v["policy"] == "storage-min-tls-1-2"
    assert v["message"] == (
        "can't run policy 'storage-min-tls-1-2' from policy pack 'azure-gpu-k8s@v0.1.0' during preview: "
        "string value at .minimumTlsVersion can't be known during preview"
    )


def test_encrypted_secrets_do_not_break_the_review(tmp_path: Path) -> None:
    st = good_cluster()
    st.inputs("apiserver-0")["osProfile"]["customData"] = {
        "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
        "ciphertext": "v1:abc",
    }
    path = tmp_path / "secret.json"
    path.write_text(json.dumps(st.export()))
    code, out, _ = agk("--file", str(path), "--format", "json")
    assert (code, json.loads(out)["violations"]) == (0, [])


def test_console_script_exit_status() -> None:
    agk_bin = Path(sys.executable).parent / "agk"
    done = subprocess.run(
        [str(agk_bin), "review", "--file", str(BROKEN), "--format", "json"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and done.stderr == ""
    assert len(json.loads(done.stdout)["violations"]) == 8
