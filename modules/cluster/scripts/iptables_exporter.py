"""DaemonSet (host network): Prometheus counters of the host's iptables rules commented ``iptables-exporter <labels>``.

The node bootstrap writes egress-accounting rules into the mangle table, each with a comment such as
``iptables-exporter traffic=internet-out``; every ``key=value`` after the prefix becomes a label.
The ruleset is read through the kernel's own interface, the ``IPT_SO_GET_INFO`` / ``IPT_SO_GET_ENTRIES``
socket options that libiptc and ``iptables-legacy-save`` use, so the image needs no iptables binary:
stdlib Python (ctypes) on an MCR image. That is the legacy backend, which the bootstrap switches
every host to before kubelet starts (agk-node-network.service). The socket needs CAP_NET_RAW, the
options CAP_NET_ADMIN, both in the host's network namespace; nothing is ever written.

Struct layouts (x86_64) from linux/netfilter_ipv4/ip_tables.h and linux/netfilter/x_tables.h.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import socket
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

IPT_SO_GET_INFO, IPT_SO_GET_ENTRIES = 64, 65  # IPT_BASE_CTL + 0, + 1
TABLE_NAME_LEN = 32  # XT_TABLE_MAXNAMELEN
GETINFO = struct.Struct("=32sI5I5III")  # struct ipt_getinfo
ENTRIES_HEADER = 40  # struct ipt_get_entries: name[32], size, then 8-byte aligned ipt_entry[]
ENTRY_SIZE = 112  # struct ipt_entry: ipt_ip (84), nfcache, target/next offsets, comefrom, xt_counters
OFFSETS = struct.Struct("=HH")  # ipt_entry.target_offset, next_offset (at 88)
COUNTERS = struct.Struct("=QQ")  # xt_counters pcnt, bcnt (at 96)
MATCH_HEADER = struct.Struct("=H29sB")  # xt_entry_match / xt_entry_target: size, name[29], revision
HOOKS = ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING")
PREFIX = "iptables-exporter"
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESERVED = ("table", "chain")

Getsockopt = Callable[[int, bytes], bytes]


@dataclass(frozen=True)
class Rule:
    chain: str
    comment: str
    packets: int
    bytes: int


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def kernel_getsockopt(sock: socket.socket) -> Getsockopt:
    """getsockopt(2) with an input buffer (Python's socket.getsockopt only takes a length)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def call(option: int, request: bytes) -> bytes:
        buf = ctypes.create_string_buffer(request, len(request))
        size = ctypes.c_uint32(len(request))
        if libc.getsockopt(sock.fileno(), socket.IPPROTO_IP, option, buf, ctypes.byref(size)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"getsockopt({option}): {os.strerror(err)}")
        return buf.raw[: size.value]

    return call


def read_table(table: str, getsockopt: Getsockopt) -> tuple[bytes, bytes]:
    """The table's ``ipt_getinfo`` and its ``ipt_get_entries`` blob, as the kernel returns them."""
    name = table.encode().ljust(TABLE_NAME_LEN, b"\0")
    info = getsockopt(IPT_SO_GET_INFO, name + bytes(GETINFO.size - TABLE_NAME_LEN))
    size = GETINFO.unpack(info)[-1]
    request = name + struct.pack("=I", size) + bytes(ENTRIES_HEADER - TABLE_NAME_LEN - 4) + bytes(size)
    return info, getsockopt(IPT_SO_GET_ENTRIES, request)


def parse(info: bytes, entries: bytes) -> list[Rule]:
    """Every rule carrying a comment match, with its chain and counters (pure)."""
    fields = GETINFO.unpack(info)
    valid, hook_entry, size = fields[1], fields[2:7], fields[-1]
    starts = {hook_entry[i]: HOOKS[i] for i in range(len(HOOKS)) if valid & (1 << i)}
    rules: list[Rule] = []
    chain, offset = "", 0
    while offset < size:
        base = ENTRIES_HEADER + offset
        target_offset, next_offset = OFFSETS.unpack_from(entries, base + 88)
        if next_offset < ENTRY_SIZE:
            raise ValueError(f"corrupt ruleset: entry at {offset} is {next_offset} bytes")
        chain = starts.get(offset, chain)
        target_size, target_raw, _ = MATCH_HEADER.unpack_from(entries, base + target_offset)
        target = _cstr(target_raw)
        if target == "ERROR":  # a user chain's head (its name as data) or the table's end marker
            name = _cstr(entries[base + target_offset + MATCH_HEADER.size : base + target_offset + target_size])
            chain = name if name != "ERROR" else chain
        else:
            packets, nbytes = COUNTERS.unpack_from(entries, base + 96)
            match = base + ENTRY_SIZE
            while match < base + target_offset:
                match_size, match_raw, _ = MATCH_HEADER.unpack_from(entries, match)
                if match_size < MATCH_HEADER.size:
                    raise ValueError(f"corrupt ruleset: match of {match_size} bytes at {offset}")
                if _cstr(match_raw) == "comment":
                    comment = _cstr(entries[match + MATCH_HEADER.size : match + match_size])
                    rules.append(Rule(chain, comment, packets, nbytes))
                match += match_size
        offset += next_offset
    return rules


def labels(comment: str) -> dict[str, str] | None:
    """``iptables-exporter traffic=internet-out`` -> {"traffic": "internet-out"}; None if not ours."""
    head, _, rest = comment.partition(" ")
    if head != PREFIX:
        return None
    out = {}
    for token in rest.split():
        key, eq, value = token.partition("=")
        if eq and _LABEL.match(key) and key not in RESERVED:
            out[key] = value
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(rules: Iterable[Rule], table: str) -> str:
    """Prometheus text format: packets and bytes per (chain, labels); rules with equal labels add up."""
    totals: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for rule in rules:
        extra = labels(rule.comment)
        if extra is None:
            continue
        key = (("table", table), ("chain", rule.chain), *sorted(extra.items()))
        counts = totals.setdefault(key, [0, 0])
        counts[0] += rule.packets
        counts[1] += rule.bytes
    lines = []
    for index, (metric, what) in enumerate((("packets", "Packets"), ("bytes", "Bytes"))):
        name = f"iptables_exporter_{metric}_total"
        lines += [f"# HELP {name} {what} matched by iptables rules commented '{PREFIX} ...'.", f"# TYPE {name} counter"]
        for key, counts in sorted(totals.items()):
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in key)
            lines.append(f"{name}{{{label_text}}} {counts[index]}")
    lines += [
        "# HELP iptables_exporter_rules Rules carrying the exporter's comment prefix.",
        "# TYPE iptables_exporter_rules gauge",
        f'iptables_exporter_rules{{table="{_escape(table)}"}} {len(totals)}',
    ]
    return "\n".join(lines) + "\n"


def scrape(table: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as sock:
        return render(parse(*read_table(table, kernel_getsockopt(sock))), table)


def serve(port: int, table: str) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path not in ("/metrics", "/healthz"):
                self._reply(404, "not found\n")
                return
            try:
                body = scrape(table)
            except OSError as err:
                self._reply(500, f"reading the {table} table: {err}\n")
                return
            self._reply(200, body if self.path == "/metrics" else "ok\n")

        def _reply(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("", port), Handler).serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=9119)
    parser.add_argument("--table", default="mangle")
    parser.add_argument("--once", action="store_true", help="print the metrics once and exit")
    args = parser.parse_args()
    if args.once:
        print(scrape(args.table), end="")
        return
    serve(args.port, args.table)


if __name__ == "__main__":
    main()
