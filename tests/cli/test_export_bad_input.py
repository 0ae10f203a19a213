"""`pulumi stack export` files that are not one: `agk review --file` and `--base` (plan and review)
refuse each defect with the same kind of line, exit 2, nothing on stdout.

The good export is tests/review/fixtures/good-stack.json (stack dev, a provider, parents and
dependencies); each case breaks one thing. What Pulumi itself refuses in a snapshot (VerifyIntegrity,
pulumi/pulumi pkg/resource/deploy/snapshot.go) is refused here too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .badinput import ROOT, agk, assert_refused, files

GOOD = ROOT / "tests" / "review" / "fixtures" / "good-stack.json"
FILE_HINT = "give the output of `pulumi stack export`"
BASE_HINT = "give a folder written by 'agk plan --out' or a 'pulumi stack export' file"
FIX = "give an unmodified stack export"
R = "deployment.resources"

Doc = dict[str, Any]


def good() -> Doc:
    doc: Doc = json.loads(GOOD.read_text())
    return doc


def res(doc: Doc) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = doc["deployment"]["resources"]
    return out


def edit(change: Callable[[Doc], object]) -> Callable[[], bytes]:
    def make() -> bytes:
        doc = good()
        change(doc)
        return json.dumps(doc).encode()

    return make


def raw(data: bytes | str) -> Callable[[], bytes]:
    return lambda: data if isinstance(data, bytes) else data.encode()


def _set(i: int, **values: Any) -> Callable[[Doc], object]:
    return lambda doc: res(doc)[i].update(values)


def _deep(levels: int) -> Callable[[Doc], object]:
    def change(doc: Doc) -> None:
        value: Any = 1
        for _ in range(levels):
            value = {"a": value}
        res(doc)[5].setdefault("inputs", {})["deep"] = value

    return change


def _append_copy(i: int, **values: Any) -> Callable[[Doc], object]:
    def change(doc: Doc) -> None:
        twin = copy.deepcopy(res(doc)[i])
        twin.update(values)
        res(doc).append(twin)

    return change


def _restack(i: int, stack: str = "prod", project: str = "azure-gpu-k8s") -> Callable[[Doc], object]:
    def change(doc: Doc) -> None:
        urn = res(doc)[i]["urn"]
        rest = urn.split("::", 2)[2]
        res(doc)[i]["urn"] = f"urn:pulumi:{stack}::{project}::{rest}"
        for other in res(doc):  # nothing names it any more: only its stack is wrong
            other.pop("dependencies", None)

    return change


def _stack_last(doc: Doc) -> None:
    res(doc).append(res(doc).pop(0))


URN = "urn:pulumi:dev::azure-gpu-k8s::azure-native:network:VirtualNetwork::vnet-dev"
PROVIDER = "urn:pulumi:dev::azure-gpu-k8s::pulumi:providers:azure-native::default"

# (case, the file's bytes, the message: {where} is '--file P' or '--base P', {hint} the fix for that
# flag; a pair gives --file's message and --base's where they differ.)
CASES: list[tuple[str, Callable[[], bytes], str | tuple[str, str]]] = [
    ("not JSON", raw("hello"), "{where}: not JSON (line 1: Expecting value): {hint}"),
    ("empty file", raw(""), "{where}: not JSON (line 1: Expecting value): {hint}"),
    (
        "cut short",
        raw('{"version": 3, '),
        "{where}: not JSON (line 1: Expecting property name enclosed in double quotes): {hint}",
    ),
    ("a list", raw("[1, 2]"), "{where}: a list, not an object: " + FILE_HINT),
    ("a string", raw('"state"'), "{where}: a string, not an object: " + FILE_HINT),
    ("a number", raw("3"), "{where}: a number, not an object: " + FILE_HINT),
    ("null", raw("null"), "{where}: null, not an object: " + FILE_HINT),
    ("no deployment", edit(lambda d: d.pop("deployment")), "{where}: no 'deployment' key: " + FILE_HINT),
    (
        "deployment null",
        edit(lambda d: d.update(deployment=None)),
        "{where}: 'deployment' is null, not an object: " + FILE_HINT,
    ),
    (
        "deployment a list",
        edit(lambda d: d.update(deployment=[])),
        "{where}: 'deployment' is a list, not an object: " + FILE_HINT,
    ),
    (
        "version missing",
        edit(lambda d: d.pop("version")),
        "{where}: version None is not supported: export with Pulumi 3 (deployment version 3)",
    ),
    (
        "version a string",
        edit(lambda d: d.update(version="3")),
        "{where}: version '3' is not supported: export with Pulumi 3 (deployment version 3)",
    ),
    (
        "version true",
        edit(lambda d: d.update(version=True)),
        "{where}: version True is not supported: export with Pulumi 3 (deployment version 3)",
    ),
    (
        "resources an object",
        edit(lambda d: d["deployment"].update(resources={})),
        "{where}: deployment.resources is not a list: " + FIX,
    ),
    (
        "no resources",
        edit(lambda d: d["deployment"].update(resources=[])),
        (
            "{where}: no resources (a stack never deployed?): nothing to review; " + FILE_HINT + " of a deployed stack",
            "{where}: no resources (a stack never deployed): leave out --base, and the plan lists every resource"
            " as created",
        ),
    ),
    (
        "duplicate URN",
        edit(_append_copy(5)),
        f"{{where}}: {R}[33]: urn {URN} repeats {R}[5] (only copies marked delete may): " + FIX,
    ),
    (
        "resources of two stacks",
        edit(_restack(20)),
        f"{{where}}: resources of two stacks, dev of project azure-gpu-k8s ({R}[0]) and prod of project"
        f" azure-gpu-k8s ({R}[20]): export one stack per file",
    ),
    (
        "resources of two projects",
        edit(_restack(20, stack="dev", project="other")),
        f"{{where}}: resources of two stacks, dev of project azure-gpu-k8s ({R}[0]) and dev of project"
        f" other ({R}[20]): export one stack per file",
    ),
    (
        "dependencies a number",
        edit(_set(5, dependencies=5)),
        f"{{where}}: {R}[5]: 'dependencies' is a number, not a list of URNs: " + FIX,
    ),
    (
        "dependencies an object",
        edit(_set(5, dependencies={"a": URN})),
        f"{{where}}: {R}[5]: 'dependencies' is an object, not a list of URNs: " + FIX,
    ),
    (
        "dependencies hold a number",
        edit(_set(5, dependencies=[5])),
        f"{{where}}: {R}[5]: dependencies[0] is 5, not a Pulumi URN: " + FIX,
    ),
    (
        "dependencies hold a name",
        edit(_set(5, dependencies=["vnet-dev"])),
        f"{{where}}: {R}[5]: dependencies[0] is 'vnet-dev', not a Pulumi URN: " + FIX,
    ),
    (
        "propertyDependencies a number",
        edit(_set(5, propertyDependencies=5)),
        f"{{where}}: {R}[5]: 'propertyDependencies' is not an object: " + FIX,
    ),
    (
        "propertyDependencies hold a number",
        edit(_set(5, propertyDependencies={"location": 5})),
        f"{{where}}: {R}[5]: 'propertyDependencies.location' is a number, not a list of URNs: " + FIX,
    ),
    (
        "propertyDependencies hold null",
        edit(_set(5, propertyDependencies={"location": [None]})),
        f"{{where}}: {R}[5]: propertyDependencies.location[0] is None, not a Pulumi URN: " + FIX,
    ),
    (
        "parent a number",
        edit(_set(5, parent=5)),
        f"{{where}}: {R}[5]: 'parent' is a number, not a string: " + FIX,
    ),
    (
        "parent not in the export",
        edit(_set(5, parent="urn:pulumi:dev::azure-gpu-k8s::agk:network:Gone::gone")),
        f"{{where}}: {R}[5]: its parent urn:pulumi:dev::azure-gpu-k8s::agk:network:Gone::gone is not in the"
        " export: " + FIX,
    ),
    (
        "parent after its child",
        edit(_stack_last),
        f"{{where}}: {R}[1]: its parent urn:pulumi:dev::azure-gpu-k8s::pulumi:pulumi:Stack::azure-gpu-k8s-dev"
        " comes after it: " + FIX,
    ),
    (
        "dependency not in the export",
        edit(_set(5, dependencies=["urn:pulumi:dev::azure-gpu-k8s::azure-native:network:Subnet::gone"])),
        f"{{where}}: {R}[5]: its dependency urn:pulumi:dev::azure-gpu-k8s::azure-native:network:Subnet::gone"
        " is not in the export: " + FIX,
    ),
    (
        "provider a number",
        edit(_set(5, provider=5)),
        f"{{where}}: {R}[5]: 'provider' is a number, not a string: " + FIX,
    ),
    (
        "provider not listed before",
        edit(_set(5, provider=f"{PROVIDER}::00000000-0000-0000-0000-000000000000")),
        f"{{where}}: {R}[5]: provider '{PROVIDER}::00000000-0000-0000-0000-000000000000' is not a provider"
        " listed before it: " + FIX,
    ),
    (
        "custom a string",
        edit(_set(5, custom="no")),
        f"{{where}}: {R}[5]: 'custom' is a string, not true or false: " + FIX,
    ),
    (
        "protect a number",
        edit(_set(5, protect=1)),
        f"{{where}}: {R}[5]: 'protect' is a number, not true or false: " + FIX,
    ),
    (
        "aliases a number",
        edit(_set(5, aliases=5)),
        f"{{where}}: {R}[5]: 'aliases' is a number, not a list of URNs: " + FIX,
    ),
    (
        "type not the URN's",
        edit(_set(5, type="azure-native:network:Subnet")),
        f"{{where}}: {R}[5]: type 'azure-native:network:Subnet' is not the type its urn names ({URN}): " + FIX,
    ),
    ("type a number", edit(_set(5, type=5)), f"{{where}}: {R}[5]: 'type' is a number, not a type token: " + FIX),
    ("urn not a URN", edit(_set(5, urn="vnet-dev")), f"{{where}}: {R}[5]: urn 'vnet-dev' is not a Pulumi URN: " + FIX),
    (
        "resource a string",
        edit(lambda d: d["deployment"]["resources"].insert(5, "vnet-dev")),
        f"{{where}}: {R}[5]: not an object: " + FIX,
    ),
    ("inputs a list", edit(_set(5, inputs=[1])), f"{{where}}: {R}[5]: 'inputs' is not an object: " + FIX),
    ("nested 100,000 deep", raw("[" * 100_000 + "]" * 100_000), "{where}: nested deeper than 100 levels: {hint}"),
    ("inputs nested 150 deep", edit(_deep(150)), "{where}: nested deeper than 100 levels: {hint}"),
    (
        "a key twice",
        lambda: GOOD.read_bytes().replace(b'"version": 3', b'"version": 3, "version": 3', 1),
        "{where}: key 'version' given twice in one object: {hint}",
    ),
    (
        "NaN",
        lambda: GOOD.read_bytes().replace(b'"version": 3', b'"version": 3, "x": NaN', 1),
        "{where}: NaN is not a JSON number: {hint}",
    ),
    (
        "Infinity",
        lambda: GOOD.read_bytes().replace(b'"version": 3', b'"version": 3, "x": -Infinity', 1),
        "{where}: -Infinity is not a JSON number: {hint}",
    ),
    (
        "UTF-16 (PowerShell's >)",
        lambda: GOOD.read_text().encode("utf-16"),
        "{where}: UTF-16, not UTF-8: write it with `pulumi stack export --file <path>` ({hint})",
    ),
    (
        "a byte order mark",
        lambda: b"\xef\xbb\xbf" + GOOD.read_bytes(),
        "{where}: starts with a byte order mark: save it as UTF-8 without one ({hint})",
    ),
    ("Latin-1", raw(b'{"version": 3, "x": "caf\xe9"}'), "{where}: not UTF-8 (byte 24): save it as UTF-8 ({hint})"),
]


def _message(expected: str | tuple[str, str], where: str, hint: str, base: bool) -> str:
    template = expected if isinstance(expected, str) else expected[1 if base else 0]
    return template.format(where=where, hint=hint)


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_file_for_review(tmp_path: Path, make: Callable[[], bytes], expected: str | tuple[str, str]) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(make())
    before = files(tmp_path)
    assert_refused(agk("review", "--file", str(path)), _message(expected, f"--file {path}", FILE_HINT, base=False))
    assert files(tmp_path) == before


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_base_for_plan(tmp_path: Path, make: Callable[[], bytes], expected: str | tuple[str, str]) -> None:
    """The same defect in a base is the same kind of line, before anything is planned."""
    path = tmp_path / "base.json"
    path.write_bytes(make())
    out = tmp_path / "out"
    done = agk("plan", "--stack", "dev", "--base", str(path), "--out", str(out))
    assert_refused(done, _message(expected, f"--base {path}", BASE_HINT, base=True))
    assert not out.exists()


@pytest.mark.parametrize("case", ["deployment null", "duplicate URN", "dependencies a number", "nested 100,000 deep"])
def test_bad_base_in_a_folder_for_review(tmp_path: Path, case: str) -> None:
    _, make, expected = next(c for c in CASES if c[0] == case)
    path = tmp_path / "base" / "dev" / "state.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(make())
    done = agk("review", "--stack", "dev", "--base", str(tmp_path / "base"))
    assert_refused(done, _message(expected, f"--base {path}", BASE_HINT, base=True))


def test_a_directory_is_not_an_export(tmp_path: Path) -> None:
    assert_refused(agk("review", "--file", str(tmp_path)), f"--file {tmp_path}: a directory, not a file: {FILE_HINT}")


def test_copies_marked_delete_may_repeat_a_urn(tmp_path: Path) -> None:
    """A replacement that failed half-way leaves the old copy marked `delete` (Pulumi allows it): the
    review reads the live one only, and a diff against it compares the live one."""
    path = tmp_path / "state.json"
    path.write_bytes(edit(_append_copy(5, delete=True))())
    done = agk("review", "--file", str(path))
    assert done.code == 0, done.err
    assert done.out == agk("review", "--file", str(GOOD)).out


def test_table_size() -> None:
    # Each case runs for --file and for --base: two refusals per row.
    assert len(CASES) >= 40
