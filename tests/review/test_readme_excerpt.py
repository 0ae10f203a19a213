"""docs/plan-and-review.md's pull-request excerpt (a renamed pool: diff, blast radius, review) is what the commands print."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from agk.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "docs" / "plan-and-review.md").read_text()


def _block(after: str, fence: str) -> list[str]:
    """The lines inside the first block opened by ``fence`` after the text ``after``."""
    lines = README[README.index(after) :].splitlines()
    start = lines.index(fence) + 1
    close = fence.rstrip("abcdefghijklmnopqrstuvwxyz")
    return lines[start : lines.index(close, start)]


def _agk(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout


@pytest.fixture(scope="module")
def renamed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("readme")
    stacks = where / "stacks"
    stacks.mkdir()
    for path in (ROOT / "stacks").glob("Pulumi.*.yaml"):
        shutil.copy(path, stacks / path.name)
    code, _ = _agk("plan", "--stack", "dev", "--stacks-dir", str(stacks), "--out", str(where / "base"))
    assert code == 0
    path = stacks / "Pulumi.dev.yaml"
    doc = yaml.safe_load(path.read_text())
    pools = doc["config"]["azure-gpu-k8s:cluster"]["gpu_pools"]
    pools["h100x"] = pools.pop("h100")
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return where


def test_plan_md_excerpt(renamed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(renamed)
    code, out = _agk("plan", "--stack", "dev", "--stacks-dir", "stacks", "--base", "base", "--format", "markdown")
    assert code == 0
    excerpt = _block("A pull request that renames dev's `h100` pool", "````markdown")
    lines = out.splitlines()
    # Every excerpt line is in plan.md, in the same order (the excerpt leaves some rows out).
    at = 0
    for line in excerpt:
        assert line in lines[at:], line
        at = lines.index(line, at) + 1


def test_review_excerpt(renamed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(renamed)
    block = _block("For the rename above, the review without the allowance:", "```")
    command, expected = block[0], block[1:]
    assert command == "$ agk review --stack dev --base base"
    code, out = _agk("review", "--stack", "dev", "--stacks-dir", "stacks", "--base", "base")
    assert code == 1
    assert out.splitlines() == expected


def test_allowance_example_is_what_the_reader_accepts(renamed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agk.review import allowances

    block = _block("declares it, reviewed and named, in its stack file:", "```yaml")
    text = "\n".join(block)
    raw = yaml.safe_load(text)["azure-gpu-k8s:changes"]
    (allowance,) = allowances.parse(raw, "dev")
    assert (allowance.name, allowance.action) == ("dev-gpu-h100", "delete")
    assert re.search(r"OPS-42", allowance.reason)
