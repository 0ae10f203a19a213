"""Renewal without a person: staggered leaf lifetimes, an early-renewal window the weekly job acts in
before the 30-day alert, and the scheduled job itself (actionlint checks it)."""

from __future__ import annotations

import itertools
import subprocess

import yaml

from modules.bootstrap import pki
from modules.bootstrap.context import BootstrapContext
from modules.bootstrap.monitoring import CERT_WARN_DAYS

from .conftest import ROOT

WORKFLOW = ROOT / ".github/workflows/renew-certificates.yml"


def test_no_two_hosts_of_a_group_renew_in_one_weekly_run(ctx: BootstrapContext) -> None:
    spec = pki.pki_spec(ctx)
    groups = {
        "etcd": [pki.etcd_server_cert(m.name) for m in ctx.etcd.members],
        "apiserver": [pki.apiserver_cert(h.name) for h in ctx.control_plane.apiservers],
    }
    if ctx.events_etcd:
        groups["events-etcd"] = [pki.etcd_server_cert(m.name) for m in ctx.events_etcd.members]
    for group, certs in groups.items():
        days = sorted(spec.cert(c).validity_hours / 24 for c in certs)
        gaps = [b - a for a, b in itertools.pairwise(days)]
        assert all(g > pki.RENEWAL_RUN_DAYS for g in gaps), (group, days)
    # A member's server and peer certificates renew together: one restart, not two.
    for m in ctx.etcd.members:
        assert (
            spec.cert(pki.etcd_server_cert(m.name)).validity_hours
            == spec.cert(pki.etcd_peer_cert(m.name)).validity_hours
        )
    # Not every leaf expires on one day, and none lives much longer than a year.
    lifetimes = {c.validity_hours for c in spec.certs}
    assert len(lifetimes) == pki.STAGGER_SLOTS
    assert max(lifetimes) <= pki.LEAF_HOURS + 40 * 24


def test_renewal_acts_twice_before_the_expiry_alert() -> None:
    # pulumi-tls replaces inside the early-renewal window; two weekly runs fit before the 30-day alert.
    assert pki.EARLY_RENEWAL_HOURS / 24 >= CERT_WARN_DAYS + 2 * pki.RENEWAL_RUN_DAYS


def test_the_renewal_job_runs_weekly_on_the_pki_and_actionlint_accepts_it() -> None:
    doc = yaml.safe_load(WORKFLOW.read_text())
    # PyYAML reads the `on:` key as True.
    triggers = doc.get("on", doc.get(True))
    (schedule,) = triggers["schedule"]
    _, _, dom, month, dow = schedule["cron"].split()
    assert (dom, month) == ("*", "*") and dow.isdigit(), "once a week"
    assert pki.RENEWAL_RUN_DAYS == 7
    steps = doc["jobs"]["renew"]["steps"]
    run = next(s["run"] for s in steps if "pulumi up" in s.get("run", ""))
    assert "--target '**agk:bootstrap:ClusterPki**' --target-dependents" in run
    stacks = doc["jobs"]["renew"]["strategy"]["matrix"]["stack"]
    shipped = sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml")
        for p in (ROOT / "stacks").glob("Pulumi.*.yaml")
        if "kind: cluster" in p.read_text()
    )
    assert sorted(stacks) == shipped  # every cluster stack renews
    lint = subprocess.run([str(ROOT / ".venv/bin/actionlint"), str(WORKFLOW)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
