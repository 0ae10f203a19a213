"""Host tier, real emulator: blob.py against Azurite with OAuth (tests/bootstrap/host/azurite.py says what is real)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from modules.bootstrap.host import blob
from tests.bootstrap.host.azurite import Azurite, azurite, jwt

pytestmark = pytest.mark.realtool


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    with azurite(tmp_path_factory.mktemp("azurite")) as az:
        az.create_container("etcd-backups")
        yield az


def _container(az: Azurite, token: str | None = None) -> blob.Container:
    return blob.Container(
        az.account_url, "etcd-backups", lambda: token or jwt(), cafile=az.cafile, sleep=lambda s: None
    )


@pytest.mark.parametrize("size", [1000, 3 * 1024 * 1024 + 17])
def test_round_trip_one_put_or_blocks(emulator: Azurite, tmp_path: Path, size: int) -> None:
    """Above 1 MiB this client sends 256 KiB blocks and Put Block List; Azurite assembles and stores them."""
    data = os.urandom(size)
    (tmp_path / "in.db").write_bytes(data)
    c = _container(emulator)
    name = f"dev/etcd/{size}.db"
    put = c.put(name, str(tmp_path / "in.db"), {"member": "dev-etcd-0"}, single_put_max=1 << 20, block_size=256 << 10)
    got = c.get(name, str(tmp_path / "out.db"))
    assert (tmp_path / "out.db").read_bytes() == data
    # The blob's Content-MD5 is the whole file's: Get Blob returns it and the client checked it.
    assert got.md5 == put.md5 and got.size == size and got.metadata == {"member": "dev-etcd-0"}
    [listed] = [b for b in c.list("dev/etcd/") if b.name == name]
    assert (listed.size, listed.md5, listed.metadata) == (size, put.md5, {"member": "dev-etcd-0"})


def test_list_is_in_name_order_under_the_prefix(emulator: Azurite, tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"x")
    c = _container(emulator)
    for name in ("dev/events-etcd/20261201T000000Z-a.db", "dev/etcd2/20261201T000000Z-b.db"):
        c.put(name, str(tmp_path / "x"))
    for stamp in ("20261201T020000Z-dev-etcd-1", "20261201T000000Z-dev-etcd-2", "20261201T010000Z-dev-etcd-0"):
        c.put(f"order/etcd/{stamp}.db", str(tmp_path / "x"))
    assert [b.name.rsplit("/", 1)[1] for b in c.list("order/etcd/")] == [
        "20261201T000000Z-dev-etcd-2.db",
        "20261201T010000Z-dev-etcd-0.db",
        "20261201T020000Z-dev-etcd-1.db",
    ]


def test_azurite_refuses_a_token_for_another_resource(emulator: Azurite, tmp_path: Path) -> None:
    """The Bearer token is checked (a Key Vault token is not a storage token): the OAuth path is real."""
    (tmp_path / "x").write_bytes(b"x")
    c = _container(emulator, token=jwt(audience="https://vault.azure.net"))
    with pytest.raises(blob.BlobError) as err:
        c.put("dev/etcd/refused.db", str(tmp_path / "x"))
    assert "HTTP 403 AuthenticationFailed" in str(err.value) and "the token was refused" in str(err.value)
    assert not [b for b in _container(emulator).list("dev/etcd/") if b.name.endswith("refused.db")]


def test_a_missing_blob_says_so(emulator: Azurite, tmp_path: Path) -> None:
    with pytest.raises(blob.BlobError, match=r"^Get Blob dev/etcd/none\.db .*HTTP 404 BlobNotFound: .*no such blob"):
        _container(emulator).get("dev/etcd/none.db", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
