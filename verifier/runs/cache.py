"""A cache of verdicts in SQLite, so that a sweep or a check that is run again, or that was stopped,
takes up where it was instead of deciding every run anew.

A run is keyed by everything that decides its verdict: the weights (`model.weights_sha256`), the
task and its size and options (a task built from a file describes the SHA-256 of the very bytes it
was built from, so a file replaced while a sweep reads it is keyed by what the run used), the
arithmetic, the engine, the range of inputs and the number of counterexamples asked for, and the
verifier's own source code: a cache written by other code is never read.  Only verdicts are stored
(proved, refuted); an unknown is decided again.  The timeout is not part of the key, since a verdict
does not depend on it.  Only the process that owns the cache writes it (a cluster's workers return
their results to it), so there is one writer at a time.

A row is checked before it is used: it carries the SHA-256 of its key and result, and a refuted
row's counterexamples are decided again on the evaluator (a refutation is then as sure as a new
one).  A row that fails either check is not used (the run is decided again and the row replaced),
with a warning.  The digest catches damage and edits that do not recompute it; it is no signature:
whoever can write the file can forge a proved row, so a cache is as trustworthy as its file.

The database is ours only if it holds our marker table; any other database (another program's) is
refused, never changed.  A cache that cannot be written (a read-only file) is read, with one
warning, and nothing is stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

from ..engines import Problem
from ..model import weights_sha256
from ..result import Result
from ..support.errors import InputError
from ..verdicts import Verdict

FORMAT = 2  # of the tables below; a cache of format 1 (a `runs` table, no marker) is emptied and upgraded
MARKER = "verify_cache"
TABLES = {MARKER: "CREATE TABLE verify_cache (format INTEGER NOT NULL)",
          "runs": "CREATE TABLE runs (key TEXT PRIMARY KEY, what TEXT NOT NULL, result TEXT NOT NULL, "
                  "digest TEXT NOT NULL, stored REAL NOT NULL)"}
FORMAT_1 = {"runs": ["key", "what", "result", "stored"]}


def default_path() -> Path:
    """``$XDG_CACHE_HOME/verify/results.sqlite`` (``~/.cache`` when the variable is not set)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "verify" / "results.sqlite"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """SHA-256 of the verifier package's source files: any change to the code is a new cache."""
    h = hashlib.sha256()
    root = Path(__file__).parents[1]  # the verifier package, every layer of it
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def run_key(problem: Problem, engine: str, start: int = 0, stop: Optional[int] = None,
            max_counterexamples: int = 1) -> dict:
    """What the verdict of this run depends on."""
    total = problem.task.total
    return {"verifier": code_fingerprint(), "weights_sha256": weights_sha256(problem.model),
            "task": problem.task.describe(), "arithmetic": problem.arith.describe(), "engine": engine,
            "range": [start, total if stop is None else stop], "max_counterexamples": max_counterexamples}


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()


def _row_digest(key: str, what: str, result: str) -> str:
    return hashlib.sha256("\n".join((key, what, result)).encode()).hexdigest()


def _warn(line: str) -> None:
    print(f"verify: warning: {line}", file=sys.stderr)


class Cache:
    """Verdicts by run key.  `path` is created (with its directory) if needed; `warn` gets each
    warning line (a row not used, a cache that cannot be written)."""

    def __init__(self, path: str | Path, warn: Callable[[str], None] = _warn):
        self.path = Path(path)
        self.warn = warn
        self.writable = True
        self.hits = 0
        self.stored = 0
        self.rejected = 0  # rows not used: damaged, edited, or a counterexample that does not fail
        self.db: Optional[sqlite3.Connection] = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path)
            tables = {name: [c[1] for c in self.db.execute(f"PRAGMA table_info({name!r})")] for (name,) in
                      self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            ours = tables.get(MARKER) is not None and \
                self.db.execute(f"SELECT format FROM {MARKER}").fetchall() == [(FORMAT,)]
        except (OSError, sqlite3.DatabaseError) as exc:
            raise InputError(f"cache {self.path}: cannot be used as a verdict cache ({exc})") from None
        if ours and set(tables) == set(TABLES):
            return
        if tables and tables != FORMAT_1:
            raise InputError(f"cache {self.path} is not a verdict cache of this verify (it holds the tables "
                             f"{', '.join(sorted(tables))}): refusing to change another program's database")
        try:  # a new file, or our format 1, whose rows no code of this version would read
            with self.db:
                self.db.executescript("DROP TABLE IF EXISTS runs;" + ";".join(TABLES.values())
                                      + f";INSERT INTO {MARKER} VALUES ({FORMAT})")
        except sqlite3.Error as exc:
            self._cannot_write(exc)
            self.db = None

    def _cannot_write(self, exc: Exception) -> None:
        if self.writable:
            self.warn(f"cache {self.path} cannot be written ({exc}): verdicts are not stored")
        self.writable = False

    def get(self, key: dict, problem: Problem) -> Optional[Result]:
        """The cached verdict of `problem`'s run with `key`, checked (module docstring); None when
        there is none, or the row fails its check."""
        if self.db is None:
            return None
        digest = _digest(key)
        try:
            row = self.db.execute("SELECT what, result, digest FROM runs WHERE key = ?", (digest,)).fetchone()
        except sqlite3.Error as exc:
            self.warn(f"cache {self.path} cannot be read ({exc}): deciding the run")
            return None
        if row is None:
            return None
        what, text, stored = row
        problem_with_it = None if stored == _row_digest(digest, what, text) else "does not match its digest"
        result = None
        if problem_with_it is None:
            try:
                result = Result.from_json(json.loads(text))
                problem_with_it = _check(result, problem)
            except (ValueError, KeyError, TypeError, IndexError) as exc:  # noqa: BLE001 - a damaged row is not used
                problem_with_it = f"cannot be read ({type(exc).__name__}: {exc})"
        if problem_with_it is not None:
            self.rejected += 1
            self.warn(f"cache {self.path}: the row of {problem.task.name} N={problem.task.describe().get('N')} at "
                      f"{problem.arith.label()} {problem_with_it}: not used, deciding the run again")
            return None
        assert result is not None  # read and checked: no problem with it
        self.hits += 1
        result.cached = True
        return result

    def put(self, key: dict, result: Result) -> None:
        """Store a verdict (an unknown is not stored).  A cache that cannot be written warns once."""
        if result.verdict not in (Verdict.PROVED, Verdict.REFUTED) or not self.writable or self.db is None:
            return
        digest, what, text = _digest(key), json.dumps(key, sort_keys=True, default=str), json.dumps(result.to_json())
        try:
            with self.db:  # committed at once: an interrupted sweep keeps every verdict it reached
                self.db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?)",
                                (digest, what, text, _row_digest(digest, what, text), time.time()))
        except sqlite3.Error as exc:
            self._cannot_write(exc)
            return
        self.stored += 1


def _check(result: Result, problem: Problem) -> Optional[str]:
    """Why a cached result cannot stand for `problem`'s run, or None: a verdict, and a refutation's
    counterexamples each a failure of the model now, decided again on the evaluator."""
    from .api import failure_at  # the API runs cached results through this module
    if result.verdict == Verdict.PROVED:
        return None if not result.counterexamples else "says proved beside counterexamples"
    if result.verdict != Verdict.REFUTED or not result.counterexamples:
        return f"holds no verdict to use ({result.verdict}, {len(result.counterexamples)} counterexamples)"
    for stored in result.counterexamples:
        if not result.start <= stored.index < result.stop:
            return f"has counterexample #{stored.index} outside the range {result.start}..{result.stop}"
        again = failure_at(problem, stored.index)
        fields = ("tokens", "input", "expected", "produced", "reason", "position")
        if again is None or any(getattr(again, f) != getattr(stored, f) for f in fields):
            return (f"has counterexample #{stored.index} ({stored.input} -> {stored.claim}), which the model "
                    + ("does not fail" if again is None else f"fails otherwise ({again.input} -> {again.claim})"))
    return None
