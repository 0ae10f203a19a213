"""storage-https-only reads both spellings of the setting and Azure's default when it is unset."""

from __future__ import annotations

from typing import Any

import pytest

from policies.rules.storage import https_only


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"enableHttpsTrafficOnly": True}, True),
        ({"enableHttpsTrafficOnly": False}, False),
        ({"supportsHttpsTrafficOnly": True}, True),
        ({"supportsHttpsTrafficOnly": False}, False),
        # The SDK's name wins over ARM's when an export carries both.
        ({"enableHttpsTrafficOnly": False, "supportsHttpsTrafficOnly": True}, False),
        # Unset: HTTPS only, Azure's default since API version 2019-04-01.
        ({}, True),
    ],
)
def test_https_only(props: dict[str, Any], expected: bool) -> None:
    assert https_only(props) is expected
