"""The planned storage account takes what the etcd hosts write: the lifecycle rule that enforces retention
matches every snapshot name the host program makes, and the container it writes to is the one the stack
creates and grants (mock runtime, the real infra/ program)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from modules.bootstrap.host.etcd_snapshot import Settings, blob_name
from modules.bootstrap.roles import bundle, names
from tests.bootstrap.conftest import context
from tests.infra.conftest import State


@pytest.mark.parametrize("stack", ["dev", "prod-7500"])
def test_retention_applies_to_every_snapshot_the_members_write(state: Callable[[str], State], stack: str) -> None:
    ctx = context(stack)
    (policy,) = state(stack).of_type("azure-native:storage:ManagementPolicy")
    (rule,) = policy["inputs"]["policy"]["rules"]
    filters = rule["definition"]["filters"]
    containers = {c["inputs"]["containerName"] for c in state(stack).of_type("azure-native:storage:BlobContainer")}
    for name in names(ctx, "etcd"):
        s = Settings(**json.loads(bundle(ctx, "etcd", name).file("etcd-backup.json").content))
        assert s.container in containers
        written = f"{s.container}/{blob_name(s, name, time.time())}"
        # prefixMatch starts with the container's name (lifecycle-management-overview); blobs are block blobs.
        assert any(written.startswith(prefix) for prefix in filters["prefixMatch"]), written
        assert filters["blobTypes"] == ["blockBlob"]
