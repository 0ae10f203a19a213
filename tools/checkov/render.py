"""Render every cluster stack's add-on objects (what `agk render` writes to DIR/manifests) under OUT/<stack>,
for Checkov (make lint). The objects carry their answers to Checkov's checks (modules/cluster/scan_exceptions.py).

    python tools/checkov/render.py OUT [--stacks-dir stacks]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agk.render import render_manifests_dir
from modules.stackplan.config import load_stack, stack_names
from modules.stackplan.prepare import prepare_cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--stacks-dir", type=Path, default=Path("stacks"))
    args = parser.parse_args()
    for stack in stack_names(args.stacks_dir):
        config = load_stack(args.stacks_dir, stack)
        if config.kind != "cluster":
            continue
        written = render_manifests_dir(prepare_cluster(stack, config, args.stacks_dir).addons, args.out / stack)
        print(f"{stack}: {len(written)} manifests")


if __name__ == "__main__":
    main()
