"""Host tier: the bootstrap token issuer where no API server is needed: the token and its Secret, the
configuration file, the program as the hosts run it, its systemd units and its Key Vault client (against
the stand-in Key Vault of tests/bootstrap/host/fakes.py on loopback). Its runs against dev's real API server are in
tests/controlplane/test_bootstrap_tokens.py."""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from modules.bootstrap import versions
from modules.bootstrap.host import boot, vault
from modules.bootstrap.host import bootstrap_tokens as bt
from modules.bootstrap.pki import CaSpec, CertSpec, PkiSpec
from tests.bootstrap.certs import issue
from tests.bootstrap.host.fakes import FakeVault, token_of
from tests.bootstrap.host.loopback import serve

HOST = Path(__file__).resolve().parents[3] / "modules/bootstrap/host"
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600
TTL = bt.TTL_HOURS * HOUR
RENEW = bt.RENEW_BEFORE_HOURS * HOUR
ISSUER_CLIENT = "11111111-2222-3333-4444-555555555555"
VAULT_BEARER = token_of(ISSUER_CLIENT)
SECRETS = {pool: f"{bt.vault_secret_key(pool)}-0a1b2c3d" for pool in ("h100-a", "system")}
"""Pool -> its token's Key Vault secret (the cluster stack adds a digest of the pool identity)."""

DOCUMENTED_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")  # kubernetes.io, "Token Format"


@pytest.fixture
def kv() -> Iterator[tuple[FakeVault, str]]:
    """The stand-in Key Vault on loopback, the issuer a Secrets Officer on each pool's secret."""
    store = FakeVault()
    for name in SECRETS.values():
        store.grant_write(name, ISSUER_CLIENT)
    with serve(store) as url:
        yield store, url


# -- the token and its Secret ----------------------------------------------------------------------


def test_tokens_have_the_documented_format_and_round_trip() -> None:
    tokens = {str(bt.Token.generate()) for _ in range(500)}
    assert len(tokens) == 500 and all(DOCUMENTED_TOKEN.match(t) for t in tokens)
    # Every character of the alphabet turns up: the draw is not biased towards a subset.
    assert set("".join(tokens).replace(".", "")) == set(bt.ALPHABET)
    assert all(str(bt.Token.parse(t)) == t for t in tokens)
    for bad in (
        "ABCDEF.0123456789abcdef",
        "abcde.0123456789abcdef",
        "abcdef.0123456789abcdef\n",
        "abcdef0123456789abcdefg",
    ):
        assert bt.Token.parse(bad) is None


@pytest.mark.parametrize("minor", versions.SUPPORTED)
def test_the_token_secret_is_the_documented_one_and_a_valid_secret(minor: str) -> None:
    token = bt.Token("abc123", "0123456789abcdef")
    obj = bt.token_secret(token, "h100-a", NOW + 24 * HOUR, "apiserver-0")
    kubernetes_validate.validate(obj, minor, strict=True)
    assert obj["metadata"]["name"] == "bootstrap-token-abc123" and obj["metadata"]["namespace"] == "kube-system"
    assert obj["type"] == "bootstrap.kubernetes.io/token"
    data = obj["stringData"]
    assert (data["token-id"], data["token-secret"], data["usage-bootstrap-authentication"]) == (
        "abc123",
        "0123456789abcdef",
        "true",
    )
    assert "usage-bootstrap-signing" not in data  # it signs no cluster-info ConfigMap
    # "an absolute UTC time using RFC3339"
    assert data["expiration"] == "2027-01-16T08:00:00Z"
    assert dt.datetime.fromisoformat(data["expiration"]).timestamp() == NOW + 24 * HOUR
    groups = data["auth-extra-groups"].split(",")
    assert groups == [bt.NODES_GROUP, "system:bootstrappers:agk:pool:h100-a"]
    assert all(bt.GROUP_PATTERN.match(g) for g in groups)


def test_an_unreachable_api_server_publishes_nothing(kv: tuple[FakeVault, str], tmp_path: Path) -> None:
    store, url = kv
    pems = issue(
        PkiSpec(
            cas=(CaSpec("ca", "test Kubernetes CA"),), certs=(CertSpec("issuer", "ca", bt.ISSUER_USER),), key_pairs=()
        )
    )
    files = {}
    for name in ("cert:ca", "cert:issuer", "key:issuer"):
        files[name] = tmp_path / name.replace(":", ".")
        files[name].write_text(pems[name])
    config = bt.IssuerConfig(
        apiserver="https://127.0.0.1:1",
        ca_file=str(files["cert:ca"]),
        cert_file=str(files["cert:issuer"]),
        key_file=str(files["key:issuer"]),
        vault_url=url,
        client_id=ISSUER_CLIENT,
        pools=SECRETS,
    )
    outcomes = bt.run(
        config,
        bt.KubeApi(config.apiserver, config.ca_file, config.cert_file, config.key_file),
        VAULT_BEARER,
        now=NOW,
        host="h",
    )
    assert {o.action for o in outcomes} == {"failed"}
    assert "ConnectionRefusedError" in outcomes[0].message or "Connection refused" in outcomes[0].message
    assert store.current(SECRETS["h100-a"]) is None


# -- the program -----------------------------------------------------------------------------------


def host_json(tmp: Path, vault_url: str = "https://kv.vault.azure.net/") -> str:
    """The API server's /etc/agk/host.json: the issuer takes the vault and its identity from there."""
    path = tmp / "host.json"
    path.write_text(
        boot.HostConfig("apiserver", "apiserver-0", "dev", vault_url, "apiserver-0-x", ISSUER_CLIENT).to_json()
    )
    return str(path)


GOOD = {
    "apiserver": "https://127.0.0.1:6443",
    "ca_file": "/etc/kubernetes/pki/ca.crt",
    "cert_file": "/etc/kubernetes/pki/i.crt",
    "key_file": "/etc/kubernetes/pki/i.key",
    "pools": {"h100-a": "pool-h100-a-bootstrap-token-0a1b2c3d"},
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"poolz": ["x"]},
            "poolz: unknown key: use only apiserver, ca_file, cert_file, key_file, pools, renew_before_hours, ttl_hours",
        ),
        (
            {"vault_url": "https://kv.vault.azure.net"},  # host.json has it: one copy
            "vault_url: unknown key: use only apiserver, ca_file, cert_file, key_file, pools, renew_before_hours, ttl_hours",
        ),
        ({"ca_file": None}, "ca_file: must be a non-empty string"),
        ({"apiserver": "127.0.0.1:6443"}, "apiserver: '127.0.0.1:6443' is not a URL: use https://<host>[:port]"),
        ({"pools": {}}, "pools: {}: map each pool to its token's Key Vault secret"),
        ({"pools": ["h100-a"]}, "pools: ['h100-a']: map each pool to its token's Key Vault secret"),
        ({"pools": {"H100": "s"}}, "pools: 'H100' cannot name a bootstrap group: use lowercase letters, digits, '-'"),
        ({"pools": {"a": "s_1"}}, "pools.a: 's_1' is not a Key Vault secret name: use 1-127 letters, digits, '-'"),
        ({"pools": {"a": "s", "b": "s"}}, "pools: two pools share a Key Vault secret: give each its own"),
        ({"ttl_hours": 0}, "ttl_hours: 0: use a whole number of hours >= 1"),
        ({"ttl_hours": "24"}, "ttl_hours: '24': use a whole number of hours >= 1"),
        (
            {"ttl_hours": 12},
            "renew_before_hours: 12 is not below ttl_hours 12: renew before a token expires (e.g. half its lifetime)",
        ),
    ],
)
def test_bad_configuration_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], message: str
) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**GOOD, **change}))
    assert bt.main(["--config", str(path), "--host-config", host_json(tmp_path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == f"error: {path}: {message}\n"


def test_a_missing_key_or_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({k: v for k, v in GOOD.items() if k != "key_file"}))
    host = host_json(tmp_path)
    assert bt.main(["--config", str(path), "--host-config", host]) == 2
    assert capsys.readouterr().err == f"error: {path}: key_file: missing: add it\n"
    assert bt.main(["--config", str(path), "--host-config", str(tmp_path / "none.json")]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {tmp_path / 'none.json'}: No such file or directory: the host's facts come from its customData\n"
    )
    assert bt.main(["--config", str(tmp_path / "nope.json"), "--host-config", host]) == 2
    assert (
        capsys.readouterr().err
        == f"error: {tmp_path / 'nope.json'}: No such file or directory: write the issuer configuration there\n"
    )


def test_the_configuration_round_trips() -> None:
    config = bt.IssuerConfig.from_json(json.dumps(GOOD), vault_url="https://kv.vault.azure.net/", client_id="c")
    assert config.ttl_hours == bt.TTL_HOURS and config.renew_before_hours == bt.RENEW_BEFORE_HOURS
    assert bt.IssuerConfig.from_json(config.to_json(), vault_url=config.vault_url, client_id="c") == config


@pytest.mark.parametrize("module", ["bootstrap_tokens.py", "vault.py", "node_token.py"])
def test_host_modules_parse_as_python_3_10(module: str) -> None:
    """The oldest host image's Python (3.10) must accept the file; 3.11-only modules are not imported."""
    source = (HOST / module).read_text()
    tree = ast.parse(source, feature_version=(3, 10))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
    }
    assert not imported & {"tomllib", "modules", "tests"}, imported
    assert not any(isinstance(n, ast.Attribute) and n.attr == "UTC" for n in ast.walk(tree))  # datetime.UTC: 3.11


def test_the_vault_client_reads_and_writes_through_the_7_4_data_plane(kv: tuple[FakeVault, str]) -> None:
    store, url = kv
    name = "pool-x-bootstrap-token"
    store.grant_write(name, ISSUER_CLIENT)
    assert vault.read(url, name, VAULT_BEARER) is None
    written = vault.write(url, name, "v1", VAULT_BEARER, expires=123, tags={"a": "b"})
    assert (written.value, written.expires, dict(written.tags)) == ("v1", 123, {"a": "b"})
    vault.write(url, name, "v2", VAULT_BEARER)
    read = vault.read(url, name, VAULT_BEARER)
    assert (
        read is not None
        and read.value == "v2"
        and read.expires is None
        and read.id.startswith("https://vault/secrets/")
    )
    with pytest.raises(vault.VaultError, match=r"^PUT secret bad_name: HTTP 400 BadParameter"):
        vault.write(url, "bad_name", "v", VAULT_BEARER, sleep=lambda s: None)
    # Secrets Officer on one secret is no grant on another.
    with pytest.raises(vault.VaultError, match=r"^PUT secret other: HTTP 403 Forbidden: .*setSecret"):
        vault.write(url, "other", "v", VAULT_BEARER, sleep=lambda s: None)


@pytest.mark.realtool
def test_systemd_accepts_the_issuer_units(tmp_path: Path) -> None:
    from modules.bootstrap.templating import render
    from tests.bootstrap.conftest import tool

    analyze = tool("systemd-analyze")
    service = render(
        "agk-bootstrap-tokens.service.j2",
        program="/opt/agk/lib/bootstrap_tokens.py",
        config=bt.DEFAULT_CONFIG,
        timeout_s=300,
    )
    timer = render(
        "agk-bootstrap-tokens.timer.j2",
        every_minutes=bt.EVERY_MINUTES,
        renew_before_hours=bt.RENEW_BEFORE_HOURS,
        spread_s=60,
    )
    (tmp_path / "agk-bootstrap-tokens.service").write_text(service)
    (tmp_path / "agk-bootstrap-tokens.timer").write_text(timer)
    run = subprocess.run(
        [
            analyze,
            "verify",
            "--man=no",
            str(tmp_path / "agk-bootstrap-tokens.timer"),
            str(tmp_path / "agk-bootstrap-tokens.service"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0 and not (run.stdout + run.stderr).strip(), run.stdout + run.stderr
    assert (
        "ExecStart=/usr/bin/python3 /opt/agk/lib/bootstrap_tokens.py --config /etc/agk/bootstrap-tokens.json" in service
    )
    assert f"OnUnitActiveSec={bt.EVERY_MINUTES}min" in timer


def test_the_program_runs_as_the_hosts_run_it(tmp_path: Path) -> None:
    """From /opt/agk/lib as a script, beside the host library, importing nothing of the toolkit."""
    from modules.bootstrap.roles.upkeep import HOST_PROGRAMS

    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("bootstrap_tokens.py", *HOST_PROGRAMS):
        (lib / name).write_text((HOST / name).read_text())
    config = tmp_path / "bootstrap-tokens.json"
    config.write_text(json.dumps({**GOOD, "ttl_hours": 6}))
    run = subprocess.run(
        [
            sys.executable,
            "-E",
            "-s",
            str(lib / "bootstrap_tokens.py"),
            "--config",
            str(config),
            "--host-config",
            host_json(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert (run.returncode, run.stdout) == (2, "")
    assert (
        run.stderr
        == f"error: {config}: renew_before_hours: 12 is not below ttl_hours 6: renew before a token expires (e.g. half its lifetime)\n"
    )
