"""A minimal in-cluster Kubernetes API client (stdlib only: the pods run a plain Python image)."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


class Conflict(Exception):
    """HTTP 409: the object changed since it was read."""


class NotFound(Exception):
    """HTTP 404: the object does not exist (any more)."""


PAGE = 250
"""Objects per LIST page. A realistic Node is ~20 KB of JSON (50 images, conditions, managed fields):
250 of them are ~5 MB to parse at a time, whatever the cluster's size, where one unpaginated LIST of
7,576 nodes is ~150 MB (kubernetes.io, API concepts, "Retrieving large results sets in chunks")."""


class Api:
    def __init__(self, base: str, token: str, context: ssl.SSLContext | None) -> None:
        self.base, self.token, self.context = base.rstrip("/"), token, context

    @classmethod
    def in_cluster(cls) -> Api:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        with open(f"{SA}/token") as f:
            token = f.read().strip()
        return cls(f"https://{host}:{port}", token, ssl.create_default_context(cafile=f"{SA}/ca.crt"))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        *,
        content_type: str = "application/merge-patch+json",
    ) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as err:
            if err.code == 409:
                raise Conflict(path) from None
            if err.code == 404:
                raise NotFound(path) from None
            raise

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def pages(self, path: str, *, limit: int = PAGE, **query: str) -> Iterator[list[dict[str, Any]]]:
        """A LIST in pages of ``limit`` (the ``continue`` token of each page asks for the next), so a client
        holds one page at a time. An expired token (410 Gone, after compaction) fails the list: the caller
        runs again later, from the start."""
        token = ""
        while True:
            page = self.get(path, **query, limit=str(limit), **({"continue": token} if token else {}))
            yield list(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def pages_with_meta(
        self, path: str, *, limit: int = PAGE, **query: str
    ) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
        """``pages`` with each page's list metadata (its ``resourceVersion`` is where a watch starts)."""
        token = ""
        while True:
            page = self.get(path, **query, limit=str(limit), **({"continue": token} if token else {}))
            meta = page.get("metadata") or {}
            yield list(page.get("items") or []), meta
            token = meta.get("continue") or ""
            if not token:
                return

    def stream(self, path: str, query: dict[str, str], *, timeout: float) -> Iterator[dict[str, Any]]:
        """A watch: one event (``type``, ``object``) per line of the response, read as it arrives."""
        url = self.base + path + "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, method="GET")
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        with urllib.request.urlopen(req, context=self.context, timeout=timeout) as resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)
