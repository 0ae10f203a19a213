"""How the hosts' programs are tuned: the settings each component's section of a cluster stack adds to its
count and sizes (``cluster.etcd``, ``cluster.api_servers``, ``cluster.prometheus``, ``cluster.nodes``;
modules/stackplan/config.py). Here, beside the bootstrap that reads them.

Every field has a default: the reference design's (etcd's tuning guide, kube-prometheus, OpenAI's 7,500-node
post).
"""

from __future__ import annotations

import re

from pydantic import Field, ValidationInfo, field_validator, model_validator

from modules.bootstrap.encryption import MAX_KEYS
from modules.config_model import StrictModel
from modules.vm_sizing.formulas import SCRAPE_TIMEOUT_S, duration_seconds

_DURATION = re.compile(r"^[1-9][0-9]*(s|m|h)$")
_KEY_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}[a-z0-9]$")


def check_duration(value: str, key: str) -> str:
    if not _DURATION.match(value):
        raise ValueError(f"{key} {value!r} is not a duration: use e.g. '30s', '5m' or '1h'")
    return value


class EtcdTuning(StrictModel):
    """How the members of one etcd cluster are tuned (cluster.etcd; cluster.events_etcd follows it where it sets
    nothing of its own)."""

    rtt_ms: int = Field(
        default=100,
        description="Worst round trip between members, disk stalls included (ms): heartbeat = RTT, "
        "election timeout = 10 x RTT (etcd tuning guide). 100 gives etcd's own defaults.",
    )
    quota_backend_gib: int = Field(
        default=8, description="quota-backend-bytes in GiB (etcd default 2, suggested maximum 8)."
    )
    snapshot_count: int = Field(default=10000, description="Applied entries between snapshots (etcd 3.5's default).")
    compaction_retention: str = Field(
        default="1h", description="Periodic auto-compaction keeps this much history (the API server compacts too)."
    )

    @field_validator("rtt_ms")
    @classmethod
    def _rtt(cls, v: int) -> int:
        if v <= 0 or v > 5000:
            raise ValueError(f"rtt_ms {v} is out of range: use 1 to 5000 (election timeout = 10 x RTT <= 50 s)")
        return v

    @field_validator("quota_backend_gib")
    @classmethod
    def _quota(cls, v: int) -> int:
        if not 1 <= v <= 8:
            raise ValueError(f"quota_backend_gib {v} is out of range: use 1 to 8 (etcd's suggested maximum)")
        return v

    @field_validator("snapshot_count")
    @classmethod
    def _snapshots(cls, v: int) -> int:
        if v < 1000:
            raise ValueError(f"snapshot_count {v} is too low: use at least 1000")
        return v

    @field_validator("compaction_retention")
    @classmethod
    def _retention(cls, v: str) -> str:
        return check_duration(v, "compaction_retention")


class ControlPlaneTuning(StrictModel):
    """kube-apiserver, scheduler and controller-manager limits; unset values scale with node count."""

    max_requests_inflight: int | None = Field(
        default=None,
        description="--max-requests-inflight per API server (default: kube-up's tier for the node count: 400; "
        "1,500 above 500 nodes; 3,000 above 3,000).",
    )
    max_mutating_requests_inflight: int | None = Field(
        default=None,
        description="--max-mutating-requests-inflight per API server (default: the tier's 200, 500 or 1,000; a "
        "third of max_requests_inflight when that is set, at least 200).",
    )
    client_qps: int | None = Field(
        default=None, description="Scheduler and controller-manager API QPS (default: 20 / 100 / 200 by size)."
    )
    client_burst: int | None = Field(default=None, description="Their API burst (default: 2 x QPS).")
    audit_log_max_age_days: int = Field(default=7, ge=1, le=365, description="Days of audit log kept.")
    encryption_keys: list[str] = Field(
        default_factory=lambda: ["secrets-1"],
        description="Names of the keys that encrypt Secrets in etcd (secretbox; the cluster stack generates "
        "each key, modules/bootstrap/encryption.py), in the order the API servers try them: the first "
        'encrypts new writes, every one decrypts. One key, two during a rotation (docs/etcd.md "Encryption at '
        'rest": add the new name last, then move it first, rewrite, drop the old). Renaming or removing a '
        "key that still encrypts data makes those Secrets unreadable.",
    )

    @field_validator("encryption_keys")
    @classmethod
    def _encryption_keys(cls, v: list[str]) -> list[str]:
        if not 1 <= len(v) <= MAX_KEYS:
            raise ValueError(f"{len(v)} keys: list 1 key, or {MAX_KEYS} while rotating (the new one and the old one)")
        for name in v:
            if not _KEY_NAME.match(name):
                raise ValueError(
                    f"{name!r} is not a valid key name: use 2-32 lowercase letters, digits and '-', "
                    "starting with a letter"
                )
        twice = [name for name in v if v.count(name) > 1]
        if twice:
            raise ValueError(f"{twice[0]!r} is listed twice: list each key once")
        return v

    @model_validator(mode="after")
    def _positive(self) -> ControlPlaneTuning:
        for key in ("max_requests_inflight", "max_mutating_requests_inflight", "client_qps", "client_burst"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"{key} {value} must be at least 1: raise it or remove it for the default")
        return self


class NodeTuning(StrictModel):
    """Kubelet and container runtime settings for GPU and system nodes."""

    image_gc_high_percent: int = Field(default=85, description="Disk use that starts image GC.")
    image_gc_low_percent: int = Field(default=70, description="Disk use image GC frees down to.")
    image_pull_progress_deadline: str = Field(
        default="30m", description="containerd gives up on a stalled pull after this (large ML images)."
    )

    @model_validator(mode="after")
    def _gc(self) -> NodeTuning:
        if not 0 < self.image_gc_low_percent < self.image_gc_high_percent <= 100:
            raise ValueError(
                f"image_gc_low_percent {self.image_gc_low_percent} / image_gc_high_percent "
                f"{self.image_gc_high_percent}: need 0 < low < high <= 100"
            )
        check_duration(self.image_pull_progress_deadline, "image_pull_progress_deadline")
        return self


class PrometheusTuning(StrictModel):
    """The Prometheus server on the dedicated hosts."""

    grafana: bool = Field(
        default=True,
        description="Grafana OSS beside each Prometheus, with the platform dashboards (the Prometheus image's, at "
        "the versions table's release); false runs none.",
    )
    gomaxprocs: int = Field(default=24, description="GOMAXPROCS (bounds WAL replay on many-core hosts).")
    query_timeout: str = Field(default="2m", description="--query.timeout.")
    query_max_samples: int = Field(default=50_000_000, description="--query.max-samples.")
    scrape_interval: str = Field(default="30s", description="Global scrape interval.")
    remote_write_url: str | None = Field(default=None, description="Optional remote_write endpoint (https).")
    data_disk_gib: int | None = Field(
        default=None,
        ge=64,
        le=32767,
        description="TSDB data disk size; default: retention x estimated ingestion at the scrape interval "
        "(modules.vm_sizing.formulas.prometheus_disk_gib).",
    )

    @field_validator("gomaxprocs", "query_max_samples")
    @classmethod
    def _positive(cls, v: int, info: ValidationInfo) -> int:
        if v < 1:
            raise ValueError(f"{info.field_name} {v} must be at least 1: raise it")
        return v

    @field_validator("query_timeout", "scrape_interval")
    @classmethod
    def _durations(cls, v: str, info: ValidationInfo) -> str:
        return check_duration(v, str(info.field_name))

    @field_validator("scrape_interval")
    @classmethod
    def _scrape_interval(cls, v: str) -> str:
        # Prometheus refuses a scrape timeout longer than the interval, and the timeout is what a scrape of
        # kube-state-metrics at full size needs (modules/vm_sizing/formulas.py).
        if duration_seconds(v) < SCRAPE_TIMEOUT_S:
            raise ValueError(
                f"scrape_interval {v!r} is shorter than the {SCRAPE_TIMEOUT_S}s scrape timeout, which Prometheus "
                f"refuses: use at least '{SCRAPE_TIMEOUT_S}s'"
            )
        return v

    @field_validator("remote_write_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("https://"):
            raise ValueError(f"remote_write_url {v!r} is not https: use an https:// endpoint")
        return v
