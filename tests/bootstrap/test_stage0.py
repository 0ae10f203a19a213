"""customData's stage 0 is pinned: Azure refuses a change to an existing VM's customData, so a toolkit
change to these programs would make every later `pulumi up` of a running cluster fail."""

from __future__ import annotations

from modules.bootstrap.host.boot import LIB, STAGE0
from modules.bootstrap.userdata import STAGE0_SHA256, stage0_digest, stage0_files


def test_stage0_is_the_pinned_one() -> None:
    assert [f.path for f in stage0_files()] == [f"{LIB}/{name}" for name in STAGE0]
    assert stage0_digest() == STAGE0_SHA256, (
        "the stage-0 programs (host.boot.STAGE0) changed: every VM's customData changes with them, which "
        "Azure refuses on existing VMs; keep stage 0 as it was, or make it a decision: update "
        "userdata.STAGE0_SHA256 and say in the release notes that existing clusters need their fixed hosts "
        "replaced (agk plan --base lists them)"
    )
