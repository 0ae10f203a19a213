"""A stand-in for Azure's instance metadata service (IMDS), served where IMDS is: 169.254.169.254:80.

Run inside a throwaway network namespace that carries the address on its loopback. It enforces
what IMDS enforces (instance-metadata-service docs): the ``Metadata: true`` header and no
``X-Forwarded-For`` (a proxy in the path), and answers only the routes it is given. A route may
fail its first N requests with 503, so clients' retries are exercised.

usage: fake_imds.py ADDRESS PORT ROUTES.json   (ROUTES: {"/path?query": {"body": ..., "fail_first": N}})
"""

import http.server
import json
import sys

address, port, routes_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(routes_file) as f:
    ROUTES = json.load(f)
SEEN: dict[str, int] = {}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.headers.get("Metadata") != "true" or self.headers.get("X-Forwarded-For"):
            self._send(400, "Bad request: Metadata: true required, no X-Forwarded-For")
            return
        route = ROUTES.get(self.path)
        if route is None:
            self._send(404, "Not found")
            return
        SEEN[self.path] = SEEN.get(self.path, 0) + 1
        if SEEN[self.path] <= route.get("fail_first", 0):
            self._send(503, "Service unavailable")
            return
        body = route["body"]
        self._send(200, body if isinstance(body, str) else json.dumps(body))

    def _send(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


server = http.server.ThreadingHTTPServer((address, port), Handler)
print("ready", flush=True)
server.serve_forever()
