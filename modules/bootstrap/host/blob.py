"""Blob storage as the hosts use it: Put Blob, Put Block + Put Block List, Get Blob and List Blobs on one
container, authorised with a managed identity's OAuth token (stdlib only; Python 3.10).

The cluster's storage account takes no shared keys (``allowSharedKeyAccess: false``), so every request
carries ``Authorization: Bearer <token>`` and a service version of 2017-11-09 or later ("Authorize
access to blobs using Microsoft Entra ID": "pass the access token in the Authorization header using the
Bearer scheme, and specify a service version of 2017-11-09 or higher"). The token is the host identity's
for ``https://storage.azure.com/`` (``imds.token(imds.STORAGE, client_id)``); Azure refuses Bearer over
plain HTTP, and so does this client except on loopback (the tests' stand-ins).

Sizes (REST "Put Blob", "Put Block" and storage-blob-scale-targets, service version 2019-12-12 or later):
one Put Blob may carry up to 5000 MiB, one block up to 4000 MiB, a blob up to 50,000 blocks. This client
sends files up to ``SINGLE_PUT_MAX`` in one Put Blob and larger ones as ``BLOCK_SIZE`` blocks committed
with Put Block List, so no request body above 64 MiB is ever held in memory (an etcd snapshot is up to
the 8 GiB quota: 128 blocks). Every body carries ``Content-MD5``, which the service checks ("the
operation fails with error code 400 (Bad Request)" on a mismatch); the whole file's MD5 is stored as the
blob's Content-MD5 (``x-ms-blob-content-md5``) and Get Blob checks it on the way back ("If the blob has
an MD5 hash and this Get Blob operation is to read the full blob, this response header is returned").

Retries: 408, 429, 500, 502, 503 and 504 and broken connections are retried with a growing wait (the
scalability targets page: on 503 "Server Busy" or 500 "Operation Timeout" use exponential back-off).
Every request is idempotent: Put Blob and Put Block List replace, Put Block with the same ID replaces the
uncommitted block. A 401 (an expired token) fetches a new token once.
"""

from __future__ import annotations

import base64
import email.message
import email.utils
import hashlib
import http.client
import os
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import BinaryIO, TypeVar

API_VERSION = "2021-08-06"
"""Newer than 2017-11-09 (OAuth) and 2019-12-12 (the 5000 MiB Put Blob and 4000 MiB blocks)."""
MIB = 1024 * 1024
SINGLE_PUT_MAX = 64 * MIB
"""Files up to this size go in one Put Blob (the service takes up to 5000 MiB; this bounds memory)."""
BLOCK_SIZE = 64 * MIB
"""Block size above ``SINGLE_PUT_MAX`` (the service takes up to 4000 MiB per block)."""
MAX_BLOCKS = 50_000
"""Blocks per blob (storage-blob-scale-targets: "Maximum number of blocks in a block blob")."""
RETRIED = (408, 429, 500, 502, 503, 504)
_METADATA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # metadata names are C# identifiers
_T = TypeVar("_T")

# What an operator can do about Azure's answer (REST "Blob service error codes", "Common error codes").
HINTS = {
    "AuthorizationPermissionMismatch": "the identity needs Storage Blob Data Contributor (write) or Reader (read) "
    "on the container",
    "AuthorizationFailure": "the account refuses this network: it is reached only through its private endpoint, "
    "from inside the VNet",
    "ContainerNotFound": "the container does not exist: create it (pulumi up with etcd.backup.enabled)",
    "BlobNotFound": "no such blob: list the container for the names it holds",
    "InvalidAuthenticationInfo": "the token was refused: check the identity's client id and the token's resource "
    "(https://storage.azure.com/)",
    "AuthenticationFailed": "the token was refused: check the identity's client id and the token's resource "
    "(https://storage.azure.com/)",
}


class BlobError(Exception):
    """A request failed: one line naming the operation, the blob, Azure's answer and what to do."""


class _Transient(Exception):
    """A failure worth another try (a short or corrupt download)."""


@dataclass(frozen=True)
class Blob:
    name: str
    size: int
    last_modified: float
    """Seconds since the epoch."""
    md5: str | None = None
    """Base64 MD5 of the content (the blob's Content-MD5 property), when the writer set one."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Names in lower case: the service compares them case-insensitively and need not keep the case written."""


def _md5() -> hashlib._Hash:
    # Not a security use; FIPS-mode hosts refuse md5() without this flag.
    return hashlib.md5(usedforsecurity=False)


def _b64md5(data: bytes) -> str:
    h = _md5()
    h.update(data)
    return base64.b64encode(h.digest()).decode()


def _error_text(reason: str, headers: email.message.Message, body: bytes) -> tuple[str, str]:
    """Azure's error code and the first line of its message (the XML ``<Error>`` body)."""
    code = headers.get("x-ms-error-code", "")
    message = ""
    try:
        root = ET.fromstring(body) if body else None
    except ET.ParseError:
        root = None
    if root is not None:
        code = code or (root.findtext("Code") or "")
        message = (root.findtext("Message") or "").strip().splitlines()[0] if root.findtext("Message") else ""
    return code, message or reason


class Container:
    """One blob container of one account, e.g. ``Container("https://acct.blob.core.windows.net", "etcd-backups",
    lambda: imds.token(imds.STORAGE, client_id))``. ``cafile`` trusts another CA (the tests' emulator)."""

    def __init__(
        self,
        account_url: str,
        container: str,
        token: Callable[[], str],
        *,
        cafile: str | None = None,
        tries: int = 6,
        timeout: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        url = urllib.parse.urlsplit(account_url)
        if url.scheme != "https" and url.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise BlobError(
                f"account URL {account_url!r}: Bearer tokens go only over HTTPS: use https://<account>.blob.core.windows.net"
            )
        self.account_url = account_url.rstrip("/")
        self.container = container
        self._token_source = token
        self._token: str | None = None
        self.tries, self.timeout, self.sleep = tries, timeout, sleep
        context = ssl.create_default_context(cafile=cafile)
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))

    def url(self, name: str = "", **query: str) -> str:
        path = f"{self.account_url}/{self.container}"
        if name:
            path += "/" + urllib.parse.quote(name, safe="/")
        return path + ("?" + urllib.parse.urlencode(query) if query else "")

    # -- operations ------------------------------------------------------------------------------

    def put(
        self,
        name: str,
        path: str,
        metadata: Mapping[str, str] | None = None,
        *,
        single_put_max: int | None = None,
        block_size: int | None = None,
    ) -> Blob:
        """Upload file ``path`` as block blob ``name`` (replacing one of that name)."""
        single = SINGLE_PUT_MAX if single_put_max is None else single_put_max
        block = BLOCK_SIZE if block_size is None else block_size
        meta = self._metadata_headers(metadata or {})
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            if size <= single:
                data = f.read()
                md5 = _b64md5(data)
                headers = {
                    "x-ms-blob-type": "BlockBlob",
                    "Content-Type": "application/octet-stream",
                    "Content-MD5": md5,
                }
                self._call("PUT", self.url(name), f"Put Blob {name}", data, {**headers, **meta}, (201,), _discard)
                return Blob(name, size, time.time(), md5, {k.lower(): v for k, v in (metadata or {}).items()})
            return self._put_blocks(name, f, size, block, meta, {k.lower(): v for k, v in (metadata or {}).items()})

    def _put_blocks(
        self, name: str, f: BinaryIO, size: int, block: int, meta: dict[str, str], metadata: dict[str, str]
    ) -> Blob:
        count = -(-size // block)
        if count > MAX_BLOCKS:
            raise BlobError(
                f"Put Block {name}: {size} bytes make {count} blocks of {block}, over {MAX_BLOCKS}: raise the block size"
            )
        whole = _md5()
        ids = []
        for i in range(count):
            chunk = f.read(block)
            whole.update(chunk)
            # Put Block: IDs are Base64, at most 64 bytes before encoding, and the same length for every block.
            block_id = base64.b64encode(f"agk-{i:06d}".encode()).decode()
            self._call(
                "PUT",
                self.url(name, comp="block", blockid=block_id),
                f"Put Block {i + 1}/{count} of {name}",
                chunk,
                {"Content-MD5": _b64md5(chunk)},
                (201,),
                _discard,
            )
            ids.append(block_id)
        body = (
            '<?xml version="1.0" encoding="utf-8"?><BlockList>'
            + "".join(f"<Latest>{b}</Latest>" for b in ids)
            + "</BlockList>"
        ).encode()
        md5 = base64.b64encode(whole.digest()).decode()
        headers = {
            "Content-Type": "application/xml",
            "Content-MD5": _b64md5(body),
            "x-ms-blob-content-md5": md5,
            "x-ms-blob-content-type": "application/octet-stream",
        }
        self._call(
            "PUT",
            self.url(name, comp="blocklist"),
            f"Put Block List {name}",
            body,
            {**headers, **meta},
            (201,),
            _discard,
        )
        return Blob(name, size, time.time(), md5, metadata)

    def get(self, name: str, dest: str) -> Blob:
        """Download blob ``name`` to file ``dest`` (written beside it first, then renamed), checking its
        length and, when the blob has one, its Content-MD5."""
        part = dest + ".part"

        def save(response: http.client.HTTPResponse) -> Blob:
            h = _md5()
            got = 0
            with open(part, "wb") as out:
                while chunk := response.read(MIB):
                    out.write(chunk)
                    h.update(chunk)
                    got += len(chunk)
            expected = int(response.headers.get("Content-Length") or got)
            md5 = response.headers.get("Content-MD5")
            if got != expected:
                raise _Transient(f"{got} of {expected} bytes arrived")
            if md5 and base64.b64encode(h.digest()).decode() != md5:
                raise _Transient(f"MD5 {base64.b64encode(h.digest()).decode()} is not the blob's {md5}")
            modified = email.utils.parsedate_to_datetime(response.headers["Last-Modified"]).timestamp()
            meta = {
                k[len("x-ms-meta-") :].lower(): v
                for k, v in response.headers.items()
                if k.lower().startswith("x-ms-meta-")
            }
            return Blob(name, got, modified, md5, meta)

        try:
            blob = self._call("GET", self.url(name), f"Get Blob {name}", None, {}, (200,), save)
        except BaseException:
            if os.path.exists(part):
                os.unlink(part)
            raise
        os.replace(part, dest)
        return blob

    def list(self, prefix: str = "") -> list[Blob]:
        """Every blob whose name starts with ``prefix``, in name order (List Blobs returns "blobs in
        alphabetical order"), following ``NextMarker`` across pages."""
        out: list[Blob] = []
        marker = ""
        while True:
            query = {"restype": "container", "comp": "list", "prefix": prefix, "include": "metadata"}
            if marker:
                query["marker"] = marker
            body = self._call("GET", self.url(**query), f"List Blobs {prefix or '(all)'}", None, {}, (200,), _read)
            root = ET.fromstring(body)
            for item in root.iterfind("Blobs/Blob"):
                props = item.find("Properties")
                meta = item.find("Metadata")
                out.append(
                    Blob(
                        name=item.findtext("Name") or "",
                        size=int(props.findtext("Content-Length") or 0) if props is not None else 0,
                        last_modified=email.utils.parsedate_to_datetime(
                            props.findtext("Last-Modified") or ""
                        ).timestamp()
                        if props is not None and props.findtext("Last-Modified")
                        else 0.0,
                        md5=(props.findtext("Content-MD5") or None) if props is not None else None,
                        metadata={m.tag.lower(): m.text or "" for m in meta} if meta is not None else {},
                    )
                )
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return out

    # -- transport -------------------------------------------------------------------------------

    def _metadata_headers(self, metadata: Mapping[str, str]) -> dict[str, str]:
        headers = {}
        for key, value in metadata.items():
            if not _METADATA_NAME.match(key) or not value.isascii():
                raise BlobError(f"metadata {key}={value!r}: names are C# identifiers and values ASCII")
            headers[f"x-ms-meta-{key}"] = value
        return headers

    def _bearer(self, fresh: bool = False) -> str:
        if self._token is None or fresh:
            self._token = self._token_source()
        return self._token

    def _call(
        self,
        method: str,
        url: str,
        what: str,
        body: bytes | None,
        headers: Mapping[str, str],
        ok: tuple[int, ...],
        consume: Callable[[http.client.HTTPResponse], _T],
    ) -> _T:
        where = f"{what} ({self.container} in {self.account_url})"
        refreshed = False
        last = ""
        attempt = 0
        while attempt < self.tries:
            if attempt:
                self.sleep(min(2**attempt, 60))
            attempt += 1
            request = urllib.request.Request(url, data=body, method=method)
            for k, v in headers.items():
                request.add_header(k, v)
            request.add_header("Authorization", f"Bearer {self._bearer()}")
            request.add_header("x-ms-version", API_VERSION)
            request.add_header("x-ms-date", email.utils.formatdate(usegmt=True))
            request.add_header("x-ms-client-request-id", str(uuid.uuid4()))
            if body is not None:
                request.add_header("Content-Length", str(len(body)))
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    if response.status not in ok:
                        raise BlobError(f"{where}: unexpected HTTP {response.status}")
                    return consume(response)
            except urllib.error.HTTPError as err:
                data = err.read()
                code, message = _error_text(err.reason, err.headers, data)
                request_id = err.headers.get("x-ms-request-id", "")
                last = f"HTTP {err.code} {code}: {message}" + (f" (x-ms-request-id {request_id})" if request_id else "")
                if err.code == 401 and not refreshed:
                    refreshed = True
                    self._bearer(fresh=True)
                    attempt -= 1  # a new token is not a retry of a failing service
                    continue
                if err.code not in RETRIED:
                    hint = HINTS.get(code)
                    raise BlobError(f"{where}: {last}" + (f": {hint}" if hint else "")) from None
            except _Transient as err:
                last = str(err)
            except (OSError, http.client.HTTPException) as err:
                last = f"{type(err).__name__}: {err}"
        raise BlobError(f"{where}: {last}, after {attempt} tries") from None


def _read(response: http.client.HTTPResponse) -> bytes:
    return response.read()


def _discard(response: http.client.HTTPResponse) -> None:
    response.read()
