"""`make bench`: every ``bench/<area>.py`` that exposes ``rows()``, printed as one table.

A module whose ``rows()`` raises gets one row with the error, so one broken area never hides
the figures of the others; the exit status is then 1.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def collect(folder: Path = HERE, package: str = "bench") -> list[tuple[str, str, str]]:
    """(area, metric, value) for every module of ``package`` (in ``folder``), in file-name order."""
    out: list[tuple[str, str, str]] = []
    for path in sorted(folder.glob("*.py")):
        area = path.stem
        if area.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"{package}.{area}")
            rows = getattr(module, "rows", None)
            if rows is None:
                continue
            out.extend((area, str(metric), str(value)) for metric, value in rows())
        except Exception as err:  # one area's failure is reported in its row, not raised
            where = traceback.extract_tb(err.__traceback__)[-1]
            out.append((area, "error", f"{type(err).__name__}: {err} ({Path(where.filename).name}:{where.lineno})"))
    return out


def table(rows: list[tuple[str, str, str]]) -> str:
    head = ("area", "metric", "value")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(2)]
    lines = [f"{head[0]:<{widths[0]}}  {head[1]:<{widths[1]}}  {head[2]}"]
    lines.append(f"{'-' * widths[0]}  {'-' * widths[1]}  {'-' * 5}")
    lines += [f"{a:<{widths[0]}}  {m:<{widths[1]}}  {v}" for a, m, v in rows]
    return "\n".join(lines)


def main() -> int:
    sys.path.insert(0, str(HERE.parent))
    rows = collect()
    print(table(rows))
    # A broken area still prints the others, but `make bench` fails: figures must not rot silently.
    return 1 if any(metric == "error" for _, metric, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
