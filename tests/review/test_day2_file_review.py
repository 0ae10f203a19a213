"""`agk review --file` says what it could not check (issue 20, item 8), on real exports.

Before issue 20: a real export's versioned type tokens (azure-native:compute/v20240701:VirtualMachine)
matched no policy, so those resources passed unchecked; an export with no Azure resource at all, or
whose inputs had another shape than the SDK's, passed in silence; and violations from several files did
not say which file they came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from agk.cli import app

REAL = Path(__file__).parent / "fixtures" / "real"
VM_TOKEN = "azure-native:compute:VirtualMachine"
VERSIONED = "azure-native:compute/v20240701:VirtualMachine"


def agk(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _export(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((REAL / f"{name}.stack.json").read_text())
    return doc


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _verdicts(path: Path) -> set[tuple[str, str]]:
    code, out, err = agk("review", "--file", str(path), "--format", "json")
    assert code in (0, 1), err
    return {(v["policy"], v["urn"].rsplit("::", 1)[-1]) for v in json.loads(out)["violations"]}


def test_a_versioned_type_token_is_checked_as_its_type(tmp_path: Path) -> None:
    plain = _export("upgrade-networked-vm")
    versioned = json.loads(json.dumps(plain).replace(VM_TOKEN, VERSIONED))
    assert VERSIONED in json.dumps(versioned)
    unversioned = _verdicts(_write(plain, tmp_path / "plain.json"))
    assert {p for p, name in unversioned if name == "vm"} >= {"encryption-at-host", "ssh-keys-only"}
    assert _verdicts(_write(versioned, tmp_path / "versioned.json")) == unversioned


def test_an_export_with_nothing_the_pack_checks_is_refused(tmp_path: Path) -> None:
    stack = "urn:pulumi:prod::web::pulumi:pulumi:Stack::web-prod"
    doc = {
        "version": 3,
        "deployment": {
            "resources": [
                {"urn": stack, "custom": False, "type": "pulumi:pulumi:Stack"},
                {
                    "urn": "urn:pulumi:prod::web::aws:s3/bucket:Bucket::site",
                    "custom": True,
                    "type": "aws:s3/bucket:Bucket",
                    "parent": stack,
                    "inputs": {"acl": "public-read"},
                },
            ]
        },
    }
    path = _write(doc, tmp_path / "aws.json")
    code, out, err = agk("review", "--file", str(path))
    assert (code, out) == (2, "")
    assert err == (
        f"error: --file {path}: no Azure (azure-native) or Kubernetes resource (aws:s3/bucket:Bucket): the policy pack"
        " checks those only, so nothing in it could be checked; give the export of an Azure stack\n"
    )


def test_inputs_of_another_shape_are_refused_not_passed(tmp_path: Path) -> None:
    doc = _export("upgrade-networked-vm")
    for i, res in enumerate(doc["deployment"]["resources"]):
        if res["type"] == VM_TOKEN:
            res["inputs"]["osProfile"] = "azureuser"
            index = i
    path = _write(doc, tmp_path / "shape.json")
    code, out, err = agk("review", "--file", str(path))
    assert (code, out) == (2, "")
    assert err == (
        f"error: --file {path}: deployment.resources[{index}]: inputs.osProfile of {VM_TOKEN} is a string, not an"
        " object: the policies cannot check it (they would pass it silently): give an unmodified stack export\n"
    )


def test_violations_from_several_files_name_their_file(tmp_path: Path) -> None:
    vm, blob = REAL / "upgrade-networked-vm.stack.json", REAL / "upgrade-storage-blob.stack.json"
    code, out, _ = agk("review", "--file", str(vm), "--file", str(blob), "--format", "json")
    assert code == 1
    sources = {(v["urn"].rsplit("::", 1)[-1], v["source"]) for v in json.loads(out)["violations"]}
    assert ("vm", str(vm)) in sources and ("store", str(blob)) in sources
    code, out, _ = agk("review", "--file", str(vm), "--file", str(blob))
    header = next(x for x in out.splitlines() if "encryption-at-host" in x)
    assert header.endswith(f"  ({vm})")
