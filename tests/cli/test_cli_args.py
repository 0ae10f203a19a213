"""Arguments a new user gets wrong, for both commands: one line naming the argument and the fix."""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest

from .badinput import ROOT, agk, assert_refused, run

GOOD = ROOT / "tests" / "review" / "fixtures" / "good-stack.json"
KNOWN = "dev, dev-addons, hub, prod-7500, prod-7500-addons"
NO_STACKS_DIR = "--stacks-dir /nonexistent: no such directory: pass the folder with the Pulumi.<stack>.yaml files"
STACK_EMPTY = "--stack: empty: give a stack name, e.g. --stack dev (stacks/Pulumi.<stack>.yaml)"


def _qualified(name: str, own: str) -> str:
    return (
        f"--stack {name}: a qualified or path-like name: give the stack's own name (--stack {own}),"
        " the <stack> of stacks/Pulumi.<stack>.yaml"
    )


def _not_a_name(name: str) -> str:
    return f"--stack {name!r}: not a Pulumi stack name: use at most 100 ASCII letters, digits, '-', '_' and '.'"


AGK: list[tuple[list[str], str]] = [
    (["plan", "--stack", ""], STACK_EMPTY),
    (["plan", "--stack", "   "], STACK_EMPTY),
    (["plan", "--stack", "org/azure-gpu-k8s/dev"], _qualified("org/azure-gpu-k8s/dev", "dev")),
    (["plan", "--stack", "../stacks/Pulumi.dev"], _qualified("../stacks/Pulumi.dev", "Pulumi.dev")),
    (["plan", "--stack", "my dev"], _not_a_name("my dev")),
    (["plan", "--stack", "x" * 101], _not_a_name("x" * 101)),
    (["review", "--stack", ""], STACK_EMPTY),
    (["review", "--stack", "dev:1"], _not_a_name("dev:1")),
    (["render", "--stack", "", "--out", "x"], STACK_EMPTY),
    (["render", "--stack", "a/b", "--out", "x"], _qualified("a/b", "b")),
    (
        ["plan", "--stack", "dev", "--stacks-dir", ""],
        "--stacks-dir: empty: give the folder with the Pulumi.<stack>.yaml files",
    ),
    (["review", "--file", ""], "--file: empty: give a `pulumi stack export` file"),
    (["plan", "--stack", "dev", "--stacks-dir", "/nonexistent"], NO_STACKS_DIR),
    (["review", "--stack", "dev", "--stacks-dir", "/nonexistent"], NO_STACKS_DIR),
    (["render", "--stack", "dev", "--out", "x", "--stacks-dir", "/nonexistent"], NO_STACKS_DIR),
    (["plan", "--stack", "dév"], _not_a_name("dév")),
    (["plan", "--stack", "dev", "--base", ""], "--base: empty: give a folder written by `agk plan --out` or an export"),
    (["review", "--file", str(GOOD), "--policy-config", ""], "--policy-config: empty: give a JSON file"),
    (
        ["plan", "--stak", "dev"],
        "--stak: no such option (did you mean --stack or --stacks-dir?): see 'agk plan --help'",
    ),
    (["plan", "-x"], "-x: no such option: see 'agk plan --help'"),
    (
        ["plan", "--stack", "dev", "--format", "yaml"],
        "--format: 'yaml' is not one of 'text', 'json', 'markdown': see 'agk plan --help'",
    ),
    (
        ["review", "--all", "--format", "html"],
        "--format: 'html' is not one of 'text', 'json', 'sarif', 'markdown': see 'agk review --help'",
    ),
    (["render", "--out", "x"], "--stack: missing: see 'agk render --help'"),
    (["render", "--stack", "dev"], "--out: missing: see 'agk render --help'"),
    (["plan", "--stack"], "--stack: needs a value: see 'agk plan --help'"),
    (["frob"], "frob: no such command (commands: image, plan, render, review): see 'agk --help'"),
    (["plan", "--stack", "dev", "extra"], "got unexpected extra argument (extra): see 'agk plan --help'"),
    (["--versio"], "--versio: no such option (did you mean --version?): see 'agk --help'"),
    (
        ["review", "--file", str(GOOD), "--file", str(GOOD)],
        f"--file {GOOD}: the same file as --file {GOOD}: give each stack's export once",
    ),
]


@pytest.mark.parametrize(("argv", "message"), AGK, ids=[" ".join(a)[:60] for a, _ in AGK])
def test_agk_arguments(argv: list[str], message: str) -> None:
    assert_refused(agk(*argv), message)


POLICY_CONFIG = [
    ('{"all": "advisory", "all": "mandatory"}', "key 'all' given twice in one object: fix the file"),
    ("[" * 5000 + "]" * 5000, "nested deeper than 100 levels: fix the file"),
    ('{"all": NaN}', "NaN is not a JSON number: fix the file"),
]


@pytest.mark.parametrize(("text", "message"), POLICY_CONFIG, ids=["duplicate key", "deep", "NaN"])
def test_policy_config_json_is_read_strictly(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "policy.json"
    path.write_text(text)
    assert_refused(
        agk("review", "--file", str(GOOD), "--policy-config", str(path)), f"--policy-config {path}: {message}"
    )


def test_both_versions_have_one_shape() -> None:
    mine = version("azure-gpu-k8s")
    assert (agk("--version").out, agk("--version").code) == (f"agk {mine}\n", 0)
    calc = run("subnet-calc", "--version")
    assert (calc.out, calc.code, calc.err) == (f"subnet-calc {mine}\n", 0, "")
    installed = run("agk", "--version")
    assert (installed.out, installed.code, installed.err) == (f"agk {mine}\n", 0, "")


CALC: list[tuple[list[str], str]] = [
    (["plan", "--stack", ""], STACK_EMPTY),
    (["plan", "--stack", "org/p/dev"], _qualified("org/p/dev", "dev")),
    (["plan", "--stack", "my dev"], _not_a_name("my dev")),
    (
        ["plan", "--stack", "dev", "--stacks-dir", ""],
        "--stacks-dir: empty: give the folder with the Pulumi.<stack>.yaml files",
    ),
    (["fit", "--plugin", "azure-cni", "--nodes", "5", "--stack", ""], STACK_EMPTY),
    (
        ["fit", "--plugin", "azure-cni", "--nodes", "5", "--stack", "hub"],
        "--stack hub: a hub stack has no GPU pools: give a cluster stack (dev, prod-7500)",
    ),
    (
        ["fit", "--plugin", "azure-cni", "--nodes", "5", "--stack", "dev", "--stacks-dir", "/nonexistent"],
        "--stacks-dir /nonexistent: no such directory: pass the folder with the Pulumi.<stack>.yaml files",
    ),
    (
        ["fit", "--plugin", "azure-cni", "--nodes", "5", "--stack", "dev", "--stacks-dir", ""],
        "--stacks-dir: empty: give the folder with the Pulumi.<stack>.yaml files",
    ),
    (
        ["size", "--plugin", "kubenet", "--nodes", "5", "--form", "json"],
        "unrecognized arguments: --form json: see 'subnet-calc --help'",
    ),
    (
        ["size", "--plug", "kubenet", "--nodes", "5"],
        "the following arguments are required: --plugin: see 'subnet-calc size --help'",
    ),
]


@pytest.mark.parametrize(("argv", "message"), CALC, ids=[" ".join(a)[:60] for a, _ in CALC])
def test_subnet_calc_arguments(argv: list[str], message: str) -> None:
    assert_refused(run("subnet-calc", *argv), message)


def test_a_broken_pipe_is_not_a_violation() -> None:
    """`agk review ... | head` whose reader has gone: status 74, not 1 (a mandatory violation)."""
    import os
    import subprocess

    from .badinput import BIN

    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [str(BIN / "agk"), "review", "--file", str(GOOD)],
            stdout=write,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            check=False,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (74, b"")


@pytest.mark.parametrize("tool", ["agk", "subnet-calc"])
def test_a_full_disk_is_one_line(tool: str) -> None:
    argv = ["review", "--file", str(GOOD)] if tool == "agk" else ["plan", "--stack", "dev"]
    with open("/dev/full", "w") as full:
        import subprocess

        from .badinput import BIN

        done = subprocess.run(
            [str(BIN / tool), *argv], stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, check=False
        )
    assert (done.returncode, done.stderr) == (
        74,
        "error: the output: cannot be written or read (No space left on device): free disk space or choose another path\n",
    )


def test_review_json_still_parses() -> None:
    done = agk("review", "--file", str(GOOD), "--format", "json")
    assert done.code == 0 and json.loads(done.out)["policies_run"] > 0
