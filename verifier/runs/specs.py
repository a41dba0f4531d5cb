"""Proof obligations: ``specs/*.toml``, each one problem and the verdict it must get.

A spec file holds one obligation as top-level keys:

    description = "index lookup, Bhattamishra et al. 2024 Thm 1, proved at 12 bits"
    task = "index_lookup"          # or the alias idxl
    construction = "index_lookup"  # the built-in construction, or: model = "path/to/model.npz"
    N = 16
    p = 12                         # and optionally f, rounding, overflow, accumulate
    format = "b2:2"                # instead of p and f: another number format (docs/arithmetic.md)
    sigma = 2                      # the task's options (sigma, s, instance, dim, gamma, ...)
    variant = "paper"              # optional construction parameters: variant, k, eta, seed
    engine = "auto"
    expect = "proved"              # proved | refuted | unknown
    timeout = 120                  # optional, seconds
    profiles = ["ci", "full"]      # which profiles run it (default: both)

`check` runs them and reports, for each, whether the verdict is the expected one.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..arithmetic import ACCUMULATES, FORMAT_HELP, OVERFLOWS, ROUNDINGS, parse_format
from ..constructions import CONSTRUCTIONS
from ..engines import ENGINES
from ..modelfile import load_model
from ..result import Result
from ..support.errors import InputError, InternalError
from ..support.schema import read_text, regular_file, validate
from ..tasks import ALIASES, TASKS, canonical, task_options
from ..tasks.base import split_path
from ..verdicts import Status, Verdict
from .api import build_problem
from .cache import Cache
from .cluster import Cluster, Job
from .progress import Overall

TASK_OPTION_KEYS = {o.name for t in TASKS.values() for o in t.OPTIONS}
PROBLEM_KEYS = {"N", "p", "f", "format", "rounding", "overflow", "accumulate", "variant", "k", "eta", "seed"} | \
    TASK_OPTION_KEYS
VERDICTS = tuple(Verdict)
PROFILES = ("ci", "full")
_JSON_TYPES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def spec_schema() -> dict:
    """The JSON Schema of a spec file (TOML), from the tasks' options and the engines."""
    options = {}
    for task in TASKS.values():
        for o in task.OPTIONS:
            options[o.name] = {"type": _JSON_TYPES[o.type], "description": f"{task.name}: {o.help}"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "a verify proof obligation (specs/*.toml)",
        "type": "object",
        "additionalProperties": False,
        "required": ["task", "N", "expect"],
        "properties": {
            "description": {"type": "string"},
            "task": {"type": "string", "enum": sorted([*TASKS, *ALIASES])},
            "construction": {"type": "string", "description": "the built-in construction (its name)"},
            "model": {"type": "string", "minLength": 1, "description": "a model file, relative to the spec"},
            "engine": {"type": "string", "enum": ["auto", *ENGINES]},
            "expect": {"type": "string", "enum": list(VERDICTS)},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "seconds"},
            "profiles": {"type": "array", "minItems": 1, "uniqueItems": True,
                         "items": {"type": "string", "enum": list(PROFILES)}},
            "N": {"type": "integer", "minimum": 1},
            "format": {"type": "string", "description": f"the number format: {FORMAT_HELP}; fx needs p"},
            "p": {"type": "integer", "minimum": 2, "maximum": 31},
            "f": {"type": "integer", "minimum": 0, "maximum": 31},
            "rounding": {"type": "string", "enum": list(ROUNDINGS)},
            "overflow": {"type": "string", "enum": list(OVERFLOWS)},
            "accumulate": {"type": "string", "enum": list(ACCUMULATES)},
            "variant": {"type": "string"},
            "k": {"type": "integer", "minimum": 1},
            "eta": {"type": "number"},
            "seed": {"type": "integer", "minimum": 0},
            **options,
        },
    }


@dataclass
class Spec:
    path: Path
    task: str
    expect: str
    problem: dict
    engine: str = "auto"
    timeout: Optional[float] = None
    profiles: list[str] = field(default_factory=lambda: list(PROFILES))
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

    def to_json(self) -> dict:
        return {"spec": str(self.spec.path), "expect": self.spec.expect, "verdict": self.verdict, "ok": self.ok,
                "error": self.error, "seconds": round(self.seconds, 3),
                "result": self.result.to_json() if self.result else None}


@dataclass
class Checked:
    """What `check` did: the outcomes of the specs it ran, the specs it skipped, and whether it was
    interrupted (then the outcomes are those of the specs that finished)."""

    outcomes: list[Outcome]
    skipped: list[Spec]
    interrupted: Optional[list[str]] = None  # the specs an interruption left undecided
    ran_on: str = ""  # where the runs were decided (`Cluster.describe`)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def exit_code(self) -> int:
        """1 when a verdict differs from the expected one, else 3 when interrupted, else 0."""
        return 1 if self.failed else 3 if self.interrupted else 0

    def to_json(self) -> dict:
        return {"outcomes": [o.to_json() for o in self.outcomes], "skipped": [str(s.path) for s in self.skipped],
                "interrupted": self.interrupted, "ran_on": self.ran_on}


def load_spec(path: Path) -> Spec:
    source = f"spec {path}"
    try:
        data = tomllib.loads(read_text(path, "spec"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{source} is not valid TOML ({exc})") from None
    validate(data, spec_schema(), source)
    task = canonical(data["task"])
    try:
        kind = parse_format(data.get("format"))[0]
    except InputError as exc:
        raise InputError(f"{source}: format: {exc}") from None
    if kind == "fx" and "p" not in data:
        raise InputError(f"{source}: missing key 'p' (format fx, the default, needs it)")
    if kind != "fx" and ("p" in data or "f" in data):
        raise InputError(f"{source}: p and f set the bits of FX(p, f); format {data['format']!r} is a grid of its own: "
                         f"give one or the other")
    foreign = sorted(set(data) & TASK_OPTION_KEYS - {o.name for o in task_options(task)})
    if foreign:
        known = ", ".join(o.name for o in task_options(task)) or "none"
        raise InputError(f"{source}: {foreign[0]}: not an option of task {task} (its options: {known})")
    construction = data.get("construction")
    if construction is not None and "model" in data:
        raise InputError(f"{source}: give either construction or model, not both")
    if construction is not None and construction != CONSTRUCTIONS[task].name:
        raise InputError(f"{source}: construction: no built-in construction {construction!r} for task {task} "
                         f"(it is {CONSTRUCTIONS[task].name!r})")
    try:  # files named by the spec, relative to it
        model = regular_file(path.parent / data["model"], "model file") if "model" in data else None
        for option in task_options(task):
            if option.path and isinstance(data.get(option.name), str):
                file, rest = split_path(data[option.name])
                if file is not None:
                    data[option.name] = str(regular_file(path.parent / file, option.name)) + rest
    except InputError as exc:
        raise InputError(f"{source}: {exc}") from None
    return Spec(path=path, task=data["task"], expect=data["expect"],
                problem={k: data[k] for k in PROBLEM_KEYS if k in data}, engine=data.get("engine", "auto"),
                timeout=data.get("timeout"), profiles=data.get("profiles", list(PROFILES)),
                description=data.get("description", ""), model=model)


def load_specs(paths: list[str | Path]) -> list[Spec]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.toml"))
            if not found:
                raise InputError(f"spec directory {p} has no spec files (*.toml)")
            files.extend(found)
        else:
            files.append(regular_file(p, "spec"))
    return [load_spec(f) for f in files]


def _build(spec: Spec):
    problem = dict(spec.problem)
    if "format" in problem:
        problem["arith"] = problem.pop("format")
    return build_problem(spec.task, model=load_model(spec.model) if spec.model else None, **problem)


def check(specs: list[Spec], profile: Optional[str] = None, engine: Optional[str] = None,
          progress=None, scheduler: Optional[str] = None, cache: Optional[Cache] = None,
          overall: Optional[Overall] = None) -> Checked:
    """Run each spec of the profile; an InputError or InternalError is an 'error' outcome.

    The specs run as independent jobs on `scheduler` (`verifier.runs.cluster`), their verdicts read from
    and stored in `cache`; `progress(outcome)` sees the outcomes in the specs' order.  A selection
    with no spec is an InputError: a check that ran nothing must not pass.  An interruption (Ctrl-C,
    SIGTERM) stops the check; `interrupted` names the specs it left undecided.  `overall` counts the
    specs decided, in any order (`progress.Overall`: k of n, the time left)."""
    selected = [s for s in specs if profile is None or profile in s.profiles]
    skipped = [s for s in specs if s not in selected]
    if not selected:
        raise InputError(f"no spec is in profile {profile!r} ({len(specs)} spec{'s' if len(specs) != 1 else ''} "
                         f"read, none selected): a check that runs nothing cannot pass")
    outcomes: dict[int, Outcome] = {}
    jobs = [Job(functools.partial(_build, spec), engine or spec.engine, spec.timeout) for spec in selected]
    shown = 0

    def show() -> None:
        nonlocal shown
        while shown in outcomes:
            if progress:
                progress(outcomes[shown])
            shown += 1

    done = Checked([], skipped)
    overall = overall or Overall("specs", lambda line: None)
    with Cluster(scheduler) as cluster:
        try:
            overall.start(len(selected))
            for i, value in cluster.decide(jobs, cache):
                spec = selected[i]
                if isinstance(value, (InputError, InternalError)):
                    outcomes[i] = Outcome(spec, "error", False, error=str(value))
                elif isinstance(value, Exception):
                    raise value
                elif value.status == Status.INTERRUPTED:
                    raise KeyboardInterrupt
                else:
                    outcomes[i] = Outcome(spec, value.verdict, value.verdict == spec.expect, value,
                                          seconds=value.seconds)
                result = outcomes[i].result
                overall.add(result is not None and result.cached)
                show()
        except KeyboardInterrupt:  # a verdict cut short is no outcome, even where unknown was expected
            done.interrupted = [s.name for i, s in enumerate(selected) if i not in outcomes]
        finally:
            overall.stop()
        done.ran_on = cluster.describe()
    done.outcomes = [outcomes[i] for i in sorted(outcomes)]
    return done
