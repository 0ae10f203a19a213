import sys
from pathlib import Path

# The export builder lives with the policy tests; review tests use the same fixtures.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "policies"))
