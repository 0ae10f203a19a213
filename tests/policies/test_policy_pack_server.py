"""The pack as Pulumi runs it: policies/__main__.py serves the analyzer over gRPC, and its verdicts
match `agk review`'s offline evaluation of the same resource."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from policy_fixtures import good_cluster, review
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from policies.pack import POLICIES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "policies" / "__main__.py")],
        cwd=ROOT / "policies",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().decode().strip())
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=60)
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_pack_describes_every_policy(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "azure-gpu-k8s"
    names = {p.name: p for p in info.policies}
    assert names.keys() == {p.name for p in POLICIES}
    assert names["apiserver-memory-sizing"].enforcementLevel == analyzer_pb2.ADVISORY
    assert names["storage-min-tls-1-2"].enforcementLevel == analyzer_pb2.MANDATORY
    assert "tags" in names["required-tags"].configSchema.properties


def test_server_and_offline_review_agree(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    st = good_cluster()
    st.inputs("stdev")["minimumTlsVersion"] = "TLS1_0"
    st.inputs("etcd-0-nic")["enableAcceleratedNetworking"] = False
    offline = {(v.urn, v.policy, v.message) for v in review(st).violations}
    served = set()
    for res in st.export()["deployment"]["resources"]:
        if not res.get("custom") or res["type"].startswith("pulumi:"):
            continue
        props = struct_pb2.Struct()
        props.update(res["inputs"])
        reply = analyzer.Analyze(
            analyzer_pb2.AnalyzeRequest(
                type=res["type"], properties=props, urn=res["urn"], name=res["urn"].rsplit("::", 1)[1]
            )
        )
        for d in reply.diagnostics:
            served.add((res["urn"], d.policyName, d.message.split("\n", 1)[1]))
    resource_policies = {(u, p, m) for u, p, m in offline if p in {"storage-min-tls-1-2", "accelerated-networking"}}
    assert served == resource_policies and len(served) == 2
