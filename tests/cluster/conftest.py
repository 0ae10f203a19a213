from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from modules.cluster.config import AddonsConfig
from modules.cluster.spec import AddonsSpec
from modules.stackplan.config import load_stack
from modules.stackplan.prepare import prepare_cluster
from tests.cluster.fake_azure import azure  # noqa: F401  (the Azure stand-in's fixture)

STACKS = Path(__file__).resolve().parents[2] / "stacks"


def spec_of(stack: str, *, version: str | None = None, addons: AddonsConfig | None = None) -> AddonsSpec:
    """What the cluster stack program computes and exports (the program's own prepare step), with a
    different version or addons section."""
    config = load_stack(STACKS, stack)
    cluster = config.cluster
    assert cluster is not None
    update: dict[str, object] = {"addons": addons if addons is not None else config.addons}
    if version is not None:
        update["cluster"] = cluster.model_copy(update={"kubernetes_version": version})
    changed = config.model_copy(update=update)
    if version is None:
        return prepare_cluster(stack, changed, STACKS).addons
    # The cluster boots its own release's images: the images stack it reads builds that release too.
    with tempfile.TemporaryDirectory() as tmp:
        stacks = Path(tmp) / "stacks"
        shutil.copytree(STACKS, stacks)
        path = stacks / "Pulumi.images.yaml"
        raw = yaml.safe_load(path.read_text())
        raw["config"]["azure-gpu-k8s:image_build"]["kubernetes_version"] = version
        path.write_text(yaml.safe_dump(raw))
        return prepare_cluster(stack, changed, stacks).addons


@pytest.fixture(scope="session")
def make_spec() -> Callable[..., AddonsSpec]:
    return spec_of


@pytest.fixture(scope="session")
def stacks_dir() -> Path:
    return STACKS


@pytest.fixture(scope="session")
def dev_spec() -> AddonsSpec:
    return spec_of("dev", addons=AddonsConfig(balloons={"a100": 2, "h100": 0}))


@pytest.fixture(scope="session")
def prod_spec() -> AddonsSpec:
    return spec_of("prod-7500")


@pytest.fixture(scope="session")
def spec_135() -> AddonsSpec:
    """1.35, the minor before the default: no MutatingAdmissionPolicy (GA in 1.36)."""
    return spec_of("dev", version="1.35")


@pytest.fixture(scope="session")
def spec_136() -> AddonsSpec:
    """1.36 (MutatingAdmissionPolicy is GA) with the gang scheduler off."""
    return spec_of("dev", version="1.36", addons=AddonsConfig(gang={"enabled": False}))
