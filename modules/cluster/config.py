"""Stack config for the in-cluster add-ons (the ``addons`` section of a cluster stack).

Every field has a default, so a cluster stack without an ``addons`` section gets the full set:
one namespace and GPU quota per team named on a pool, empty balloons, preflight at DCGM level 2,
gang scheduling and the health exporters. Cross-references (teams, pools, node counts) are
checked by :func:`modules.cluster.spec.addons_spec`, which sees the pools as well.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from modules.bootstrap.config import check_duration
from modules.config_model import StrictModel

# Azure's node health checks (azurehpc-health-checks) fail a node on these XIDs (github.com/Azure/azurehpc-health-checks, its GPU XID check).
FATAL_XIDS: tuple[int, ...] = (48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120)


# Intervals a cron schedule repeats exactly every day: divisors of an hour, or whole hours dividing a day.
RETEST_INTERVALS = (10, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, 1440)


class TeamConfig(StrictModel):
    """A research team: a namespace carrying its name and a GPU quota."""

    gpu_quota: int | None = Field(
        default=None,
        ge=0,
        description="GPUs the team's namespace may request in total; default: the GPUs of its pools.",
    )


class PreflightConfig(StrictModel):
    """GPU diagnostics a new node passes before it takes work, and periodic re-tests of idle nodes."""

    enabled: bool = Field(default=True, description="Run the preflight DaemonSet and the re-test CronJob.")
    level: int = Field(default=2, description="`dcgmi diag -r` level, 1 to 4 (2 takes ~2 minutes, 3 ~15 minutes).")
    timeout_minutes: int = Field(default=60, ge=5, le=600, description="Give up on a diagnostic run after this.")
    retest_period_days: int = Field(
        default=14,
        ge=1,
        le=365,
        description="Every GPU node is sent back to preflight once in this many days (when idle): the re-test "
        "runs take ceil(GPU nodes / runs in the period) nodes each (modules/cluster/spec.py retest_per_run).",
    )
    retest_every_minutes: int = Field(
        default=60,
        description=f"Minutes between two re-test runs: one of {', '.join(map(str, RETEST_INTERVALS))}.",
    )
    stuck_alert_after: str = Field(
        default="1h",
        description="A node still tainted for preflight after this raises NodeStuckInPreflight: an alert rule on "
        "the Prometheus hosts, so the cluster stack renders it (changing it rewrites those hosts' bundles, not the "
        "add-ons; docs/oncall.md).",
    )

    @field_validator("stuck_alert_after")
    @classmethod
    def _stuck(cls, v: str) -> str:
        return check_duration(v, "stuck_alert_after")

    @field_validator("retest_every_minutes")
    @classmethod
    def _every(cls, v: int) -> int:
        if v not in RETEST_INTERVALS:
            raise ValueError(
                f"retest_every_minutes {v} cannot be kept by a cron schedule: use one of "
                f"{', '.join(map(str, RETEST_INTERVALS))} (a divisor of 60, or whole hours that divide 24)"
            )
        return v


class GangConfig(StrictModel):
    """scheduler-plugins Coscheduling as a second scheduler (PodGroups)."""

    enabled: bool = Field(default=True, description="Deploy the PodGroup CRD and the second scheduler.")
    scheduler_name: str = Field(
        default="scheduler-plugins-scheduler", description="schedulerName gang pods set in their spec."
    )
    image_tag: str | None = Field(
        default=None,
        description="scheduler-plugins release (e.g. v0.31.8); default: the one built for kubernetes_version.",
    )
    permit_waiting_seconds: int = Field(
        default=60, ge=1, le=3600, description="How long placed members wait for the rest of their gang."
    )
    replicas: int = Field(default=2, ge=1, le=5, description="Scheduler replicas (leader-elected).")


class QueuesConfig(StrictModel):
    """Kueue: a ClusterQueue per team in one cohort, instead of a ResourceQuota per namespace (docs/queues.md)."""

    enabled: bool = Field(
        default=True, description="Deploy Kueue, a queue per team and Topology Aware Scheduling over the islands."
    )
    cohort: str = Field(default="gpus", description="The cohort every team's ClusterQueue lends to and borrows from.")
    borrowing_limit_percent: int | None = Field(
        default=None,
        ge=0,
        description="GPUs a team may borrow from idle teams, as a percentage of its own quota (per pool); "
        "null: every idle GPU (the lender gets them back by preemption).",
    )
    lending_limit_percent: int | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Share of a team's quota other teams may borrow while it is idle; null: all of it. What is "
        "not lent stays idle for the team's own next job (no preemption needed to get it).",
    )
    replicas: int = Field(default=2, ge=1, le=5, description="Kueue controller replicas (leader-elected).")


class HealthConfig(StrictModel):
    """Passive health: exporters, the XID rule and what remediation does about it."""

    dcgm_exporter: bool = Field(default=True, description="dcgm-exporter on every GPU node.")
    iptables_exporter: bool = Field(default=True, description="iptables-exporter (mangle table) on every node.")
    node_problem_detector: bool = Field(default=True, description="node-problem-detector with the XID rule.")
    fatal_xids: list[int] = Field(
        default_factory=lambda: list(FATAL_XIDS),
        description="XIDs that fail a node: it is cordoned, drained and replaced (Azure NHC list).",
    )
    replace_after_minutes: int = Field(default=30, ge=0, description="Grace period between cordon and VM replacement.")


class RollConfig(StrictModel):
    """The pool roll: GPU nodes brought to their scale set's latest model (a new image, a Kubernetes patch) by
    a CronJob that drains each first (modules/cluster/scripts/roll_pool.py; docs/day2.md)."""

    enabled: bool = Field(default=True, description="Run the roll CronJob (no roll: update instances by hand).")
    every_minutes: int = Field(
        default=5, ge=1, le=60, description="How often a run moves the roll on (each run is short; state is kept)."
    )
    max_unavailable_percent: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Most of a pool's nodes out of service at once (in the roll, cordoned, in preflight, fenced); "
        "at least one.",
    )
    island_max_unavailable_percent: int = Field(
        default=10,
        ge=1,
        le=100,
        description="Most of an InfiniBand island's nodes out at once while training work runs on it; at least one.",
    )
    pause_after_failed: int = Field(
        default=3,
        ge=1,
        description="Nodes that fail the roll (failed preflight, a drain or a return that timed out) before it "
        "suspends itself for a person.",
    )
    drain_timeout_minutes: int = Field(
        default=60, ge=1, description="A node whose pods are not all evicted by then fails the roll."
    )
    node_timeout_minutes: int = Field(
        default=120,
        ge=10,
        description="From Update Instances to the node released by preflight (reimage, boot, diagnostics); past it "
        "the node fails the roll. Must exceed preflight.timeout_minutes.",
    )


class AddonsConfig(StrictModel):
    """Settings for the Kubernetes objects the cluster gets (teams, balloons, preflight, ...)."""

    teams: dict[str, TeamConfig] | None = Field(
        default=None,
        description=(
            "Teams keyed by name. Omitted: every team named on a GPU pool, quota = its pools' GPUs. "
            "Given: every pool's team must be listed (a typo is an error)."
        ),
    )
    balloons: dict[str, int] = Field(
        default_factory=dict,
        description="Balloon pods per GPU pool (each holds one whole node); pools not listed get 0.",
    )
    preflight: PreflightConfig = Field(default_factory=PreflightConfig, description="Node preflight.")
    gang: GangConfig = Field(default_factory=GangConfig, description="Gang scheduling.")
    health: HealthConfig = Field(default_factory=HealthConfig, description="Passive health checks.")
    queues: QueuesConfig = Field(default_factory=QueuesConfig, description="Job queues (Kueue).")
    roll: RollConfig = Field(default_factory=RollConfig, description="Rolling GPU pools onto a new model.")
