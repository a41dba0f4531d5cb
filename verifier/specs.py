"""Proof obligations: ``specs/*.toml``, each one problem and the verdict it must get.

A spec file holds one obligation as top-level keys:

    description = "index lookup, seed 004 Thm 1, proved at 12 bits"
    task = "index_lookup"          # or the alias idxl
    construction = "index_lookup"  # the built-in construction, or: model = "path/to/model.npz"
    N = 16
    p = 12                         # and optionally f, rounding, overflow, accumulate
    sigma = 2                      # the task's options (sigma, s, instance, dim, gamma, ...)
    variant = "paper"              # optional construction parameters: variant, k, eta, seed
    engine = "auto"
    expect = "proved"              # proved | refuted | unknown
    timeout = 120                  # optional, seconds
    profiles = ["ci", "full"]      # which profiles run it (default: both)

`check` runs them and reports, for each, whether the verdict is the expected one.
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .api import build_problem, run
from .constructions import CONSTRUCTIONS
from .errors import InputError, InternalError
from .model import load_model
from .result import Result
from .tasks import TASKS, canonical

PROBLEM_KEYS = ({"N", "p", "f", "rounding", "overflow", "accumulate", "variant", "k", "eta", "seed"}
                | {o.name for t in TASKS.values() for o in t.OPTIONS})
OTHER_KEYS = {"description", "task", "construction", "model", "engine", "expect", "timeout", "profiles"}
VERDICTS = ("proved", "refuted", "unknown")


@dataclass
class Spec:
    path: Path
    task: str
    expect: str
    problem: dict
    engine: str = "auto"
    timeout: Optional[float] = None
    profiles: list[str] = field(default_factory=lambda: ["ci", "full"])
    description: str = ""
    model: Optional[Path] = None

    @property
    def name(self) -> str:
        return self.path.stem


@dataclass
class Outcome:
    spec: Spec
    verdict: str  # the verdict, or "error"
    ok: bool
    result: Optional[Result] = None
    error: str = ""
    seconds: float = 0.0


def load_spec(path: Path) -> Spec:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"spec {path}: {exc}") from None
    unknown = set(data) - PROBLEM_KEYS - OTHER_KEYS
    if unknown:
        raise InputError(f"spec {path}: unknown keys {', '.join(sorted(unknown))}")
    for key in ("task", "N", "p", "expect"):
        if key not in data:
            raise InputError(f"spec {path}: missing key '{key}'")
    if data["expect"] not in VERDICTS:
        raise InputError(f"spec {path}: expect must be one of {', '.join(VERDICTS)}, got {data['expect']!r}")
    construction = data.get("construction")
    if construction is not None and "model" in data:
        raise InputError(f"spec {path}: give either construction or model, not both")
    if construction is not None and (canonical(data["task"]) not in CONSTRUCTIONS
                                     or construction != CONSTRUCTIONS[canonical(data["task"])].name):
        raise InputError(f"spec {path}: no built-in construction {construction!r} for task {data['task']!r}")
    model = path.parent / data["model"] if "model" in data else None
    if "instance" in data:  # relative to the spec, like a model file
        data["instance"] = str(path.parent / data["instance"])
    return Spec(path=path, task=data["task"], expect=data["expect"],
                problem={k: data[k] for k in PROBLEM_KEYS if k in data}, engine=data.get("engine", "auto"),
                timeout=data.get("timeout"), profiles=list(data.get("profiles", ["ci", "full"])),
                description=data.get("description", ""), model=model)


def load_specs(paths: list[str | Path]) -> list[Spec]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("*.toml")))
        elif p.exists():
            files.append(p)
        else:
            raise InputError(f"spec path {p} does not exist")
    if not files:
        raise InputError("no spec files (*.toml) found")
    return [load_spec(f) for f in files]


def check(specs: list[Spec], profile: Optional[str] = None, engine: Optional[str] = None,
          progress=None) -> list[Outcome]:
    """Run each spec of the profile; an InputError or InternalError is an 'error' outcome."""
    outcomes = []
    for spec in specs:
        if profile is not None and profile not in spec.profiles:
            continue
        t0 = time.monotonic()
        try:
            model = load_model(spec.model) if spec.model else None
            problem = build_problem(spec.task, model=model, **spec.problem)
            result = run(problem, engine or spec.engine, timeout=spec.timeout)
            outcome = Outcome(spec, result.verdict, result.verdict == spec.expect, result)
        except (InputError, InternalError) as exc:
            outcome = Outcome(spec, "error", False, error=str(exc))
        outcome.seconds = time.monotonic() - t0
        outcomes.append(outcome)
        if progress:
            progress(outcome)
    return outcomes
