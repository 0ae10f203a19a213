"""Command-line shells: `subnet-calc` and `agk` (plan, review, render)."""
