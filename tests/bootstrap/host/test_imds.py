"""Host tier: the IMDS token client against a loopback server enforcing what IMDS enforces."""

from __future__ import annotations

from typing import Any

import pytest

from modules.bootstrap.host import imds
from tests.bootstrap.host.loopback import serve


class FakeImds:
    """IMDS's identity endpoint: ``Metadata: true`` required; fails the first ``fail`` calls with ``code``."""

    def __init__(self, fail: int = 0, code: int = 503) -> None:
        self.fail, self.code, self.calls = fail, code, 0

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> Any:
        self.calls += 1
        if headers.get("Metadata") != "true":
            return 400, {}, {"error": "invalid_request", "error_description": "Required metadata header not specified"}
        if path != "/metadata/identity/oauth2/token" or query.get("api-version") != ["2018-02-01"]:
            return 404, {}, None
        if self.calls <= self.fail:
            return self.code, {}, {"error": "unavailable"}
        return 200, {}, {"access_token": f"tok:{query['resource'][0]}:{query['client_id'][0]}", "expires_on": "1"}


def test_token_names_the_resource_and_the_identity() -> None:
    fake = FakeImds()
    with serve(fake) as url:
        assert imds.token(imds.VAULT, "cid-1", endpoint=url) == "tok:https://vault.azure.net:cid-1"


@pytest.mark.parametrize("code", [429, 500, 503, 404])
def test_transient_answers_are_retried_with_growing_waits(code: int) -> None:
    fake, waits = FakeImds(fail=3, code=code), []
    with serve(fake) as url:
        assert imds.token(imds.STORAGE, "c", endpoint=url, sleep=waits.append).startswith("tok:")
    assert waits == [2, 4, 8] and fake.calls == 4


def test_a_refusal_is_not_retried_and_says_why() -> None:
    fake = FakeImds(fail=99, code=400)
    with serve(fake) as url, pytest.raises(imds.TokenError) as err:
        imds.token(imds.VAULT, "c", endpoint=url, sleep=lambda s: None)
    assert str(err.value) == "IMDS token for https://vault.azure.net (client_id c): HTTP 400 Bad Request after 1 tries"
    assert fake.calls == 1


def test_gives_up_after_its_tries() -> None:
    fake = FakeImds(fail=99)
    with serve(fake) as url, pytest.raises(imds.TokenError, match=r"HTTP 503 Service Unavailable after 3 tries$"):
        imds.token(imds.VAULT, "c", endpoint=url, tries=3, sleep=lambda s: None)
