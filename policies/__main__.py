"""Entry point Pulumi runs for `pulumi preview --policy-pack policies/`: it only assembles the pack.

Constructing ``PolicyPack`` starts the analyzer's gRPC server and blocks, so nothing else may
import this file; the policies live in ``policies.pack``.
"""

import sys
from pathlib import Path

# Pulumi runs this file from policies/; the rules import the project's modules from the root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import PolicyPack

from policies.pack import ENFORCEMENT, NAME, POLICIES

PolicyPack(name=NAME, policies=POLICIES, enforcement_level=ENFORCEMENT)
