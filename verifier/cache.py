"""A cache of verdicts in SQLite, so that a sweep or a check that is run again, or that was stopped,
takes up where it was instead of deciding every run anew.

A run is keyed by everything that decides its verdict: the weights (`model.weights_sha256`), the
task and its size and options (and the bytes of any file an option names), the arithmetic, the
engine, the range of inputs and the number of counterexamples asked for, and the verifier's own
source code: a cache written by other code is never read.  Only verdicts are stored (proved,
refuted); an unknown is decided again.  The timeout is not part of the key, since a verdict does
not depend on it.  Only the process that owns the cache writes it (a cluster's workers return their
results to it), so there is one writer at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from functools import lru_cache
from pathlib import Path
from typing import Optional

from .engines import Problem
from .errors import InputError
from .model import weights_sha256
from .result import Result
from .tasks import task_options
from .tasks.base import split_path

SCHEMA = "CREATE TABLE IF NOT EXISTS runs (key TEXT PRIMARY KEY, what TEXT NOT NULL, result TEXT NOT NULL, " \
         "stored REAL NOT NULL)"


def default_path() -> Path:
    """``$XDG_CACHE_HOME/verify/results.sqlite`` (``~/.cache`` when the variable is not set)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "verify" / "results.sqlite"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 of the verifier package's source files: any change to the code is a new cache."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def option_files(task: str, options: dict) -> dict:
    """The files the task's options name (option -> path): their bytes are part of a run's key."""
    named = {o.name: split_path(options[o.name])[0] for o in task_options(task)
             if o.path and isinstance(options.get(o.name), str)}
    return {name: file for name, file in named.items() if file is not None}


def run_key(problem: Problem, engine: str, start: int = 0, stop: Optional[int] = None,
            max_counterexamples: int = 1, files: Optional[dict] = None) -> dict:
    """What the verdict of this run depends on.  `files`: option name -> the path it names."""
    total = problem.task.total
    return {"verifier": code_fingerprint(), "weights_sha256": weights_sha256(problem.model),
            "task": problem.task.describe(), "files": {k: file_sha256(v) for k, v in sorted((files or {}).items())},
            "arithmetic": problem.arith.describe(), "engine": engine,
            "range": [start, total if stop is None else stop], "max_counterexamples": max_counterexamples}


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


class Cache:
    """Verdicts by run key.  `path` is created (with its directory) if needed."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path)
            self.db.execute(SCHEMA)
            self.db.commit()
        except (OSError, sqlite3.DatabaseError) as exc:
            raise InputError(f"cache {self.path}: cannot be used as a verdict cache ({exc})") from None
        self.hits = 0
        self.stored = 0

    def get(self, key: dict) -> Optional[Result]:
        row = self.db.execute("SELECT result FROM runs WHERE key = ?", (_digest(key),)).fetchone()
        if row is None:
            return None
        self.hits += 1
        result = Result.from_json(json.loads(row[0]))
        result.cached = True
        return result

    def put(self, key: dict, result: Result) -> None:
        if result.verdict not in ("proved", "refuted"):
            return
        self.db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?)",
                        (_digest(key), json.dumps(key, sort_keys=True, default=str),
                         json.dumps(result.to_json()), time.time()))
        self.db.commit()  # at once: an interrupted sweep keeps every verdict it reached
        self.stored += 1
