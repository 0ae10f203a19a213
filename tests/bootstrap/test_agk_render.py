"""`agk render` through the installed console script: the files CONTRACTS.md names, bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from .conftest import ROOT, STACKS

AGK = str(Path(sys.executable).parent / "agk")


def _agk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGK, *args], capture_output=True, text=True, check=False, cwd=ROOT)


def test_render_writes_every_node_file(tmp_path: Path) -> None:
    run = _agk("render", "--stack", "prod-7500", "--out", str(tmp_path), "--stacks-dir", str(STACKS))
    assert run.returncode == 0, run.stderr
    nodes = tmp_path / "nodes"
    assert sorted(p.name for p in nodes.iterdir()) == [
        "apiserver",
        "etcd",
        "events-etcd",
        "gpu-node",
        "nat",
        "prometheus",
        "system-node",
    ]
    for role in nodes.iterdir():
        assert (role / "user-data.yaml").read_text().startswith("#cloud-config\n")
    assert yaml.safe_load((nodes / "etcd/etcd.conf.yml").read_text())["name"] == "prod-7500-etcd-0"
    assert (nodes / "etcd/by-name/prod-7500-etcd-4/etcd.conf.yml").is_file()
    # The host programs the snapshot timer runs are written beside the units that run them.
    assert (nodes / "etcd/lib/etcd_snapshot.py").is_file() and (
        nodes / "etcd/systemd/agk-etcd-snapshot.timer"
    ).is_file()
    assert not (nodes / "events-etcd/systemd/agk-etcd-snapshot.timer").exists()
    assert sorted(p.name for p in (nodes / "prometheus/rules").iterdir()) == [
        "apiserver.yml",
        "certs.yml",
        "etcd-backup.yml",
        "etcd.yml",
        "gpu.yml",
        "islands.yml",
        "nodes.yml",
        "prometheus.yml",
    ]
    assert (nodes / "prometheus/alertmanager/alertmanager.yml").is_file()
    assert (nodes / "etcd/systemd/agk-cert-expiry.timer").is_file()
    assert "iptables-exporter traffic=internet-out" in (nodes / "gpu-node/iptables/mangle.rules").read_text()
    assert (nodes / "gpu-node/by-name/h100-d/kubelet/config.yaml").is_file()
    assert (nodes / "apiserver/manifests/kube-apiserver.yaml").is_file()
    # The user-data is the stable bootstrap: no PKI at all, and the deploy-only facts are named.
    text = (nodes / "apiserver/user-data.yaml").read_text()
    assert "PRIVATE KEY" not in text and "BEGIN" not in text and "kubernetes-ca" not in text
    assert '"vault": "https://VAULT-NAME.vault.azure.net/"' in text
    # No private key leaves a deploy: the bundle (what the host's Key Vault secret holds) names its placeholders.
    bundle = json.loads((nodes / "apiserver/bundle.json").read_text())
    files = {f["path"]: f for f in bundle["files"]}
    assert files["/etc/kubernetes/pki/ca.key"]["content"].startswith("# key:kubernetes-ca: issued by ClusterPki")
    assert files["/etc/kubernetes/pki/ca.key"]["mode"] == "0600"
    assert [r["unit"] for r in bundle["restarts"] if r["gate"] == "apiserver"] == ["kube-apiserver"]
    manifests = sorted((tmp_path / "manifests").glob("*.yaml"))
    assert manifests
    for path in manifests:
        text = path.read_text()
        docs = list(yaml.safe_load_all(text))
        assert len(docs) == 1 and "kind" in docs[0]
        # No YAML anchors or aliases: objects sharing a value still spell it out.
        assert not re.search(r"[&*]id\d{3}", text), path.name


def test_shared_values_are_written_out_in_full() -> None:
    from agk.render import dump_yaml

    tolerations = [{"operator": "Exists"}]
    obj = {"kind": "List", "items": [{"tolerations": tolerations}, {"tolerations": tolerations}]}
    assert "&id001" in yaml.safe_dump(obj)  # what the plain dumper would have written
    text = dump_yaml(obj)
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text) == obj
    assert text.count("operator: Exists") == 2


def test_render_refuses_a_hub_stack(tmp_path: Path) -> None:
    run = _agk("render", "--stack", "hub", "--out", str(tmp_path), "--stacks-dir", str(STACKS))
    assert run.returncode == 2
    assert run.stderr == "error: hub: a hub stack boots no nodes: render a cluster stack\n"
    assert not any(tmp_path.iterdir())


def test_render_unknown_stack(tmp_path: Path) -> None:
    run = _agk("render", "--stack", "nope", "--out", str(tmp_path), "--stacks-dir", str(STACKS))
    assert run.returncode == 2
    assert run.stderr.startswith("error: nope: ") and run.stderr.count("\n") == 1
