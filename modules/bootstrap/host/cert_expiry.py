"""Reports when every certificate on this host expires, for the CertificateExpires* alerts (stdlib only;
Python 3.10; runs as ``agk-cert-expiry.service`` from its timer).

Neither etcd nor kube-apiserver exports the notAfter of its own serving or peer certificate, and the CAs'
and client certificates' expiry is nowhere in their metrics (kube-apiserver's
``apiserver_client_certificate_expiration_seconds`` is a histogram of the client certificates presented
to it, not of the files on the host). So this program reads the files: every ``*.crt`` and ``*.pem``
under the directories it is given, the first certificate of each, with ``openssl x509`` (in every
Ubuntu image), and writes one series per file to node-exporter's textfile directory:

    agk_certificate_expiry_timestamp_seconds{path="/etc/etcd/pki/server.crt",subject="CN=..."} <notAfter>

A file openssl cannot read is reported as ``agk_certificate_read_errors{path=...} 1``: a corrupt or
half-written certificate must not make the alert silent.

usage: python3 /opt/agk/lib/cert_expiry.py --textfile FILE DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import os
import re
import ssl
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

METRIC = "agk_certificate_expiry_timestamp_seconds"
ERRORS = "agk_certificate_read_errors"
SUFFIXES = (".crt", ".pem")


@dataclass(frozen=True)
class Found:
    path: str
    subject: str
    not_after: float | None
    """Unix seconds; None when openssl could not read the file."""


def certificate_files(dirs: Iterable[str]) -> list[str]:
    found = []
    for top in dirs:
        for root, _, files in os.walk(top):
            found += [os.path.join(root, f) for f in files if f.endswith(SUFFIXES)]
    return sorted(found)


def read(path: str, openssl: str = "openssl") -> Found:
    run = subprocess.run(
        [openssl, "x509", "-noout", "-enddate", "-subject", "-nameopt", "RFC2253", "-in", path],
        capture_output=True,
        text=True,
        check=False,
    )
    fields = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
    if run.returncode != 0 or "notAfter" not in fields:
        return Found(path, "", None)
    # openssl prints notAfter as "Dec  1 20:44:48 2027 GMT": the format ssl.cert_time_to_seconds reads.
    return Found(path, fields.get("subject", "").strip(), float(ssl.cert_time_to_seconds(fields["notAfter"])))


def _label(value: str) -> str:
    return re.sub(r'(["\\])', r"\\\1", value).replace("\n", "\\n")


def exposition(found: Sequence[Found]) -> str:
    lines = [
        f"# HELP {METRIC} notAfter of the certificate in the file, Unix seconds.",
        f"# TYPE {METRIC} gauge",
    ]
    lines += [
        f'{METRIC}{{path="{_label(f.path)}",subject="{_label(f.subject)}"}} {f.not_after:.0f}'
        for f in found
        if f.not_after is not None
    ]
    lines += [f"# HELP {ERRORS} 1 for a certificate file openssl cannot read.", f"# TYPE {ERRORS} gauge"]
    lines += [f'{ERRORS}{{path="{_label(f.path)}"}} 1' for f in found if f.not_after is None]
    return "\n".join(lines) + "\n"


def write(textfile: str, text: str) -> None:
    """Beside the target and renamed, so node-exporter never reads half a file."""
    tmp = f"{textfile}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, textfile)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description="certificate expiry as a node-exporter textfile")
    parser.add_argument("--textfile", required=True)
    parser.add_argument("--openssl", default="openssl")
    parser.add_argument("dirs", nargs="+")
    args = parser.parse_args(argv)
    found = [read(p, args.openssl) for p in certificate_files(args.dirs)]
    write(args.textfile, exposition(found))
    bad = [f.path for f in found if f.not_after is None]
    print(f"{len(found) - len(bad)} certificates reported" + (f"; unreadable: {', '.join(bad)}" if bad else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
