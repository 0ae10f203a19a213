"""Host tier: blob.py against a loopback Blob service that checks what Azure checks (Bearer token, service
version, Content-MD5 of every body, block IDs of one length) and fails on cue; Azure cannot be reached here.
The same client against Azurite: test_blob_azurite.py."""

from __future__ import annotations

import base64
import hashlib
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from modules.bootstrap.host import blob
from tests.bootstrap.host.loopback import serve

TOKEN = "tok-1"


def _md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def _error(status: int, code: str, message: str) -> tuple[int, dict[str, str], bytes]:
    body = f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code><Message>{message}\nRequestId:r-1\nTime:now</Message></Error>'
    return status, {"x-ms-error-code": code, "x-ms-request-id": "r-1", "Content-Type": "application/xml"}, body.encode()


class FakeBlobService:
    """One account (``/acct``), its containers, and a queue of failures: ``fail`` maps an operation
    (``PutBlob``, ``PutBlock``, ``PutBlockList``, ``GetBlob``, ``ListBlobs``) to answers given before the
    real one (``(status, code)`` or ``"corrupt"`` for a GetBlob body that does not match its MD5)."""

    def __init__(self, tokens: tuple[str, ...] = (TOKEN,)) -> None:
        self.blobs: dict[str, tuple[bytes, dict[str, str], str | None]] = {}
        self.staged: dict[tuple[str, str], bytes] = {}
        self.fail: dict[str, list[Any]] = {}
        self.requests: list[tuple[str, str, dict[str, str], dict[str, list[str]]]] = []
        self.tokens = tokens
        self.page = 1000

    def op(self, method: str, query: dict[str, list[str]]) -> str:
        comp = query.get("comp", [""])[0]
        if method == "PUT":
            return {"block": "PutBlock", "blocklist": "PutBlockList"}.get(comp, "PutBlob")
        return "ListBlobs" if comp == "list" else "GetBlob"

    def __call__(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], Any]:
        op = self.op(method, query)
        headers = {k.lower(): v for k, v in headers.items()}  # HTTP header names are case-insensitive
        self.requests.append((op, path, headers, query))
        if headers.get("authorization") not in {f"Bearer {t}" for t in self.tokens}:
            return _error(401, "InvalidAuthenticationInfo", "Server failed to authenticate the request.")
        if headers.get("x-ms-version", "") < "2017-11-09":
            return _error(400, "InvalidHeaderValue", "OAuth needs 2017-11-09 or later.")
        queued, corrupt = self.fail.get(op), False
        if queued:
            answer = queued.pop(0)
            if answer != "corrupt":
                return _error(*answer)
            corrupt = True
        if method == "PUT" and "content-md5" in headers and headers["content-md5"] != _md5(body):
            return _error(400, "Md5Mismatch", "The MD5 value specified in the request did not match.")
        name = path.removeprefix("/acct/")
        meta = {k.lower()[len("x-ms-meta-") :]: v for k, v in headers.items() if k.lower().startswith("x-ms-meta-")}
        if op == "PutBlob":
            assert headers["x-ms-blob-type"] == "BlockBlob"
            self.blobs[name] = (body, meta, headers["content-md5"])
            return 201, {}, b""
        if op == "PutBlock":
            self.staged[(name, query["blockid"][0])] = body
            return 201, {}, b""
        if op == "PutBlockList":
            ids = [e.text or "" for e in ET.fromstring(body)]
            data = b"".join(self.staged.pop((name, i)) for i in ids)
            self.blobs[name] = (data, meta, headers.get("x-ms-blob-content-md5"))
            return 201, {}, b""
        if op == "GetBlob":
            if name not in self.blobs:
                return _error(404, "BlobNotFound", "The specified blob does not exist.")
            data, meta, md5 = self.blobs[name]
            if corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]  # never the same byte
            out = {"Last-Modified": "Tue, 01 Dec 2026 11:00:00 GMT", **{f"x-ms-meta-{k}": v for k, v in meta.items()}}
            return 200, {**out, **({"Content-MD5": md5} if md5 else {})}, data
        prefix = query.get("prefix", [""])[0]
        container = name.split("/")[0]
        names = sorted(n for n in self.blobs if n.startswith(f"{container}/{prefix}"))
        start = int(query.get("marker", ["0"])[0])
        page = names[start : start + self.page]
        items = "".join(
            f"<Blob><Name>{n.removeprefix(container + '/')}</Name><Properties><Last-Modified>Tue, 01 Dec 2026 11:00:00 GMT"
            f"</Last-Modified><Content-Length>{len(self.blobs[n][0])}</Content-Length>"
            f"<Content-MD5>{self.blobs[n][2] or ''}</Content-MD5></Properties><Metadata>"
            + "".join(f"<{k}>{v}</{k}>" for k, v in self.blobs[n][1].items())
            + "</Metadata></Blob>"
            for n in page
        )
        more = start + self.page < len(names)
        xml = f"<EnumerationResults><Blobs>{items}</Blobs><NextMarker>{start + self.page if more else ''}</NextMarker></EnumerationResults>"
        return 200, {"Content-Type": "application/xml"}, xml.encode()


def _container(url: str, waits: list[float] | None = None, token: Any = lambda: TOKEN, **kw: Any) -> blob.Container:
    return blob.Container(
        f"{url}/acct", "backups", token, sleep=(waits.append if waits is not None else lambda s: None), **kw
    )


def _file(tmp_path: Path, size: int) -> Path:
    path = tmp_path / "snap.db"
    path.write_bytes(os.urandom(size))
    return path


def test_small_file_is_one_put_blob_with_oauth_headers(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 1000)
    with serve(fake) as url:
        _container(url).put("dev/etcd/a.db", str(path), {"member": "dev-etcd-0"})
    [(op, where, headers, _)] = fake.requests
    assert (op, where) == ("PutBlob", "/acct/backups/dev/etcd/a.db")
    assert headers["authorization"] == f"Bearer {TOKEN}"
    # OAuth needs 2017-11-09 or later; 4000 MiB blocks and 5000 MiB Put Blob need 2019-12-12 or later.
    assert headers["x-ms-version"] == blob.API_VERSION and blob.API_VERSION >= "2019-12-12"
    assert headers["content-md5"] == _md5(path.read_bytes())
    assert headers["x-ms-meta-member"] == "dev-etcd-0" and "x-ms-date" in headers
    assert fake.blobs["backups/dev/etcd/a.db"][0] == path.read_bytes()


def test_large_file_goes_in_blocks_committed_in_order(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 10 * 1024 + 5)
    with serve(fake) as url:
        made = _container(url).put("a.db", str(path), {"revision": "7"}, single_put_max=4096, block_size=1024)
    ops = [r[0] for r in fake.requests]
    assert ops == ["PutBlock"] * 11 + ["PutBlockList"]
    ids = [r[3]["blockid"][0] for r in fake.requests[:-1]]
    assert len(set(ids)) == 11 and len({len(i) for i in ids}) == 1  # Put Block: one length for every ID
    assert all(len(base64.b64decode(i)) <= 64 for i in ids)
    listed = fake.requests[-1][2]
    whole = _md5(path.read_bytes())
    assert listed["x-ms-blob-content-md5"] == whole == made.md5
    assert listed["x-ms-meta-revision"] == "7"
    assert fake.blobs["backups/a.db"][0] == path.read_bytes()


def test_too_many_blocks_is_refused_before_any_upload(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 50_001)
    with (
        serve(fake) as url,
        pytest.raises(blob.BlobError, match=r"50001 blocks of 1, over 50000: raise the block size"),
    ):
        _container(url).put("a.db", str(path), single_put_max=0, block_size=1)
    assert fake.requests == []


@pytest.mark.parametrize("status", [500, 503, 429, 408])
def test_transient_answers_are_retried_with_growing_waits(tmp_path: Path, status: int) -> None:
    fake, path, waits = FakeBlobService(), _file(tmp_path, 3000), []
    fake.fail["PutBlock"] = [(status, "ServerBusy", "busy"), (status, "ServerBusy", "busy")]
    with serve(fake) as url:
        _container(url, waits).put("a.db", str(path), single_put_max=1000, block_size=1000)
    assert waits == [2, 4]
    assert [r[0] for r in fake.requests] == ["PutBlock"] * 5 + ["PutBlockList"]
    assert fake.blobs["backups/a.db"][0] == path.read_bytes()


def test_gives_up_after_its_tries_naming_the_last_answer(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 10)
    fake.fail["PutBlob"] = [(503, "ServerBusy", "The server is busy.")] * 9
    with serve(fake) as url, pytest.raises(blob.BlobError) as err:
        _container(url, tries=3).put("a.db", str(path))
    assert str(err.value) == (
        f"Put Blob a.db (backups in {url}/acct): HTTP 503 ServerBusy: The server is busy. (x-ms-request-id r-1), "
        "after 3 tries"
    )


def test_a_refusal_is_one_line_with_azures_code_and_what_to_do(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 10)
    fake.fail["PutBlob"] = [
        (
            403,
            "AuthorizationPermissionMismatch",
            "This request is not authorized to perform this operation using this permission.",
        )
    ]
    with serve(fake) as url, pytest.raises(blob.BlobError) as err:
        _container(url).put("a.db", str(path))
    assert str(err.value) == (
        f"Put Blob a.db (backups in {url}/acct): HTTP 403 AuthorizationPermissionMismatch: This request is not "
        "authorized to perform this operation using this permission. (x-ms-request-id r-1): the identity needs "
        "Storage Blob Data Contributor (write) or Reader (read) on the container"
    )
    assert "\n" not in str(err.value) and len(fake.requests) == 1


def test_an_expired_token_is_fetched_again_once(tmp_path: Path) -> None:
    fake, path = FakeBlobService(tokens=("tok-2",)), _file(tmp_path, 10)
    issued = iter(["tok-1", "tok-2"])
    with serve(fake) as url:
        _container(url, token=lambda: next(issued)).put("a.db", str(path))
    assert [r[2]["authorization"] for r in fake.requests] == ["Bearer tok-1", "Bearer tok-2"]


def test_a_token_refused_twice_is_an_error(tmp_path: Path) -> None:
    fake, path = FakeBlobService(tokens=("other",)), _file(tmp_path, 10)
    with (
        serve(fake) as url,
        pytest.raises(blob.BlobError, match=r"HTTP 401 InvalidAuthenticationInfo: .*the token was refused"),
    ):
        _container(url).put("a.db", str(path))
    assert len(fake.requests) == 2


def test_get_checks_the_md5_and_retries_a_corrupt_download(tmp_path: Path) -> None:
    fake, path, waits = FakeBlobService(), _file(tmp_path, 5000), []
    fake.fail["GetBlob"] = ["corrupt"]
    dest = tmp_path / "out.db"
    with serve(fake) as url:
        c = _container(url, waits)
        c.put("a.db", str(path), {"revision": "9"})
        got = c.get("a.db", str(dest))
    assert dest.read_bytes() == path.read_bytes() and got.metadata == {"revision": "9"}
    assert waits == [2] and not (tmp_path / "out.db.part").exists()


def test_get_gives_up_on_a_blob_that_never_matches_its_md5(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 100)
    fake.fail["GetBlob"] = ["corrupt"] * 5
    dest = tmp_path / "out.db"
    with serve(fake) as url:
        c = _container(url, tries=3)
        c.put("a.db", str(path))
        with pytest.raises(blob.BlobError, match=r"MD5 \S+ is not the blob's \S+, after 3 tries$"):
            c.get("a.db", str(dest))
    assert not dest.exists() and not (tmp_path / "out.db.part").exists()


def test_list_follows_next_marker_and_reads_metadata(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 10)
    fake.page = 2
    with serve(fake) as url:
        c = _container(url)
        for i in range(5):
            c.put(f"dev/etcd/2026120{i}T000000Z-m.db", str(path), {"member": f"m{i}"})
        c.put("other/x.db", str(path))
        listed = c.list("dev/etcd/")
    assert [b.name for b in listed] == [f"dev/etcd/2026120{i}T000000Z-m.db" for i in range(5)]
    assert [b.metadata["member"] for b in listed] == [f"m{i}" for i in range(5)]
    assert {b.size for b in listed} == {10} and listed[0].last_modified == 1796122800.0
    assert [r[3].get("marker") for r in fake.requests if r[0] == "ListBlobs"] == [None, ["2"], ["4"]]


def test_bearer_tokens_never_go_over_plain_http_off_the_host() -> None:
    with pytest.raises(blob.BlobError, match=r"Bearer tokens go only over HTTPS"):
        blob.Container("http://acct.blob.core.windows.net", "c", lambda: TOKEN)


def test_blob_names_are_escaped_in_the_path(tmp_path: Path) -> None:
    fake, path = FakeBlobService(), _file(tmp_path, 10)
    with serve(fake) as url:
        _container(url).put("dev/a b#c.db", str(path))
    assert fake.requests[0][1] == "/acct/backups/dev/a%20b%23c.db"
