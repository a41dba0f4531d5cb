#!/usr/bin/env python3
"""mypy and ruff against a baseline that can only fall: exit 1 when either error count rises
above .ci/lint-baseline.json (the new errors are printed) or falls below it (lower the baseline:
run with --update, which never raises it).  Configuration: [tool.mypy] and [tool.ruff] in
pyproject.toml; run from anywhere, as `python3 .ci/lint.py`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "lint-baseline.json"


def mypy() -> tuple[int, str]:
    run = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    if run.returncode not in (0, 1):  # 2: mypy itself failed (bad configuration, crash)
        sys.exit(f"mypy failed (exit {run.returncode}):\n{run.stdout}{run.stderr}")
    found = re.search(r"Found (\d+) errors?", run.stdout)
    return (int(found.group(1)) if found else 0), run.stdout


def ruff() -> tuple[int, str]:
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "--no-fix", "."],
                         cwd=ROOT, capture_output=True, text=True)
    if run.returncode not in (0, 1):
        sys.exit(f"ruff failed (exit {run.returncode}):\n{run.stdout}{run.stderr}")
    return sum(1 for line in run.stdout.splitlines() if re.match(r"\S+:\d+:\d+: ", line)), run.stdout


def main(argv: list[str]) -> int:
    update = argv == ["--update"]
    if argv and not update:
        sys.exit("usage: python3 .ci/lint.py [--update]")
    baseline = json.loads(BASELINE.read_text())
    counts, ok = {}, True
    for name, tool in (("mypy", mypy), ("ruff", ruff)):
        count, output = tool()
        counts[name] = count
        allowed = baseline[name]
        if count > allowed:
            print(output, end="")
            print(f"{name}: {count} errors, more than the baseline's {allowed}: fix the new ones (above)")
            ok = False
        elif count < allowed and not update:
            print(f"{name}: {count} errors, fewer than the baseline's {allowed}: lower the baseline "
                  f"(python3 .ci/lint.py --update)")
            ok = False
        else:
            print(f"{name}: {count} errors (baseline {allowed})")
    if update and ok:
        BASELINE.write_text(json.dumps({k: min(counts[k], baseline[k]) for k in counts}, indent=2) + "\n")
        print(f"wrote {BASELINE.relative_to(ROOT)}: {counts}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
