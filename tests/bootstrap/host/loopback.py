"""An in-process HTTP server on 127.0.0.1 for the host programs' tests: each test hands it a handler
``(method, path, query, headers, body) -> (status, headers, body)`` that speaks the documented API
of what it stands in for (IMDS, Key Vault, Blob storage), since Azure cannot be reached here."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

Handler = Callable[[str, str, dict[str, list[str]], dict[str, str], bytes], tuple[int, dict[str, str], Any]]


@contextmanager
def serve(handle: Handler) -> Iterator[str]:
    """Yields the server's base URL (``http://127.0.0.1:<port>``)."""

    class Request(BaseHTTPRequestHandler):
        def _do(self) -> None:
            url = urlparse(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, headers, out = handle(self.command, url.path, parse_qs(url.query), dict(self.headers), body)
            data = out if isinstance(out, bytes) else json.dumps(out).encode() if out is not None else b""
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _do

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Request)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
