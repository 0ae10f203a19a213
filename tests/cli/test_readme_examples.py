"""docs/subnet-calc.md's `$ subnet-calc ...` examples are what the commands print today, byte for byte."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def blocks(text: str) -> list[list[str]]:
    """The lines of every fenced code block, in order (fences toggle, whatever their language)."""
    out: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                out.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return out


def examples(tool: str) -> list[tuple[str, str]]:
    """(command line, expected stdout) for every `$ <tool> ...` line inside a code block of docs/subnet-calc.md."""
    found: list[tuple[str, str]] = []
    for block in blocks((ROOT / "docs" / "subnet-calc.md").read_text()):
        current: tuple[str, list[str]] | None = None
        for line in block:
            if line.startswith("$ "):
                if current is not None:
                    found.append((current[0], "\n".join(current[1]).rstrip("\n") + "\n"))
                current = (line[2:], [])
            elif current is not None:
                current[1].append(line)
        if current is not None:
            found.append((current[0], "\n".join(current[1]).rstrip("\n") + "\n"))
    return [(cmd, out) for cmd, out in found if cmd.split()[0] == tool]


CASES = examples("subnet-calc")


def test_the_readme_has_subnet_calc_examples() -> None:
    assert {shlex.split(cmd)[1] for cmd, _ in CASES} >= {"size", "fit", "plan"}


@pytest.mark.parametrize(("command", "expected"), CASES, ids=[c for c, _ in CASES])
def test_readme_example_is_current(command: str, expected: str) -> None:
    argv = shlex.split(command)
    done = subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    # Blank lines between examples separate them in the README; trailing spaces are the tool's own.
    assert done.stdout.rstrip("\n") + "\n" == expected
