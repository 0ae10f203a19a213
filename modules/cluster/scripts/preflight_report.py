"""Last step of the preflight pod: release the node if the InfiniBand check and `dcgmi diag` passed, else mark it
failed.

Each check (an init container) writes ``pass`` or ``fail`` to its file in RESULT_FILES. On success the
preflight taint and label go, so the scheduler may use the node and the DaemonSet (which selects
the label) removes this pod. On failure the taint stays and the label becomes ``failed``: the
node takes no work, the DaemonSet lets go of it, and NodePreflightFailed asks a person to replace the VM.
"""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

if __package__:  # imported as part of the toolkit (tests, type checking)
    from modules.cluster.scripts.kube import Api, Conflict
else:  # run from the ConfigMap mount, next to kube.py
    from kube import Api, Conflict  # type: ignore[import-not-found,no-redef]


def node_patch(node: dict[str, Any], passed: bool, key: str, now: str) -> dict[str, Any]:
    """JSON merge patch for ``node``; carries resourceVersion so a concurrent change conflicts."""
    meta = node.get("metadata", {})
    annotations = {f"{key}-last-run": now, f"{key}-result": "passed" if passed else "failed"}
    if not passed:
        return {
            "metadata": {
                "resourceVersion": meta.get("resourceVersion"),
                "labels": {key: "failed"},
                "annotations": annotations,
            }
        }
    taints = [t for t in (node.get("spec", {}).get("taints") or []) if t.get("key") != key]
    return {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": {key: None},
            "annotations": annotations,
        },
        "spec": {"taints": taints},
    }


def report(api: Api, node_name: str, passed: bool, key: str, attempts: int = 5) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for _ in range(attempts):
        node = api.get(f"/api/v1/nodes/{node_name}")
        try:
            result: dict[str, Any] = api.patch(f"/api/v1/nodes/{node_name}", node_patch(node, passed, key, now))
            return result
        except Conflict:
            continue
    raise SystemExit(f"node {node_name} kept changing: gave up after {attempts} attempts")


def verdict(*files: str) -> bool:
    """Every step's file says ``pass``; a missing or unreadable one is a failure (its step did not finish)."""
    for name in files:
        try:
            with open(name) as f:
                if f.read().strip() != "pass":
                    return False
        except OSError:
            return False
    return True


def main() -> None:
    passed = verdict(*os.environ["RESULT_FILES"].split(","))
    report(Api.in_cluster(), os.environ["NODE_NAME"], passed, os.environ["PREFLIGHT_KEY"])
    print(f"preflight {'passed' if passed else 'FAILED'} on {os.environ['NODE_NAME']}", flush=True)
    # The DaemonSet deletes this pod once the label changes; exiting would only restart it.
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
