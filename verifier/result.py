"""Verdicts: the result of a run, its JSON form and its human summary."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Optional

import numpy as np

from .arithmetic import format_text
from .verdicts import EXIT_CODES, Reason, Status, Verdict


@dataclass(kw_only=True)
class Counterexample:
    """A failing input, replayed through the evaluator (generic path) before it is reported."""

    index: int  # position in the task's enumeration
    tokens: list[int]
    input: str  # the tokens by name
    expected: str
    produced: str
    reason: Reason
    margin: float
    overflow_at: list[str] = field(default_factory=list)
    real_produced: Optional[str] = None  # what the unquantized model answers (float64)
    real_margin: Optional[float] = None
    trace: dict = field(default_factory=dict, repr=False)  # name -> (codes, values, real)
    position: Optional[int] = None  # for a sequence output: the first position that fails (0-based)
    saturated_at: list[str] = field(default_factory=list)  # where values saturated, under either overflow rule

    def to_json(self) -> dict:
        return {"index": self.index, "tokens": self.tokens, "input": self.input, "position": self.position,
                "expected": self.expected, "produced": self.produced, "reason": self.reason,
                "margin": finite_or_none(self.margin), "overflow_at": self.overflow_at,
                "saturated_at": self.saturated_at,
                "real_produced": self.real_produced,
                "real_margin": finite_or_none(self.real_margin)}

    @classmethod
    def from_json(cls, d: dict) -> "Counterexample":
        """A counterexample read back from `to_json` (the trace is not part of it)."""
        return cls(index=d["index"], tokens=d["tokens"], input=d["input"], expected=d["expected"],
                   produced=d["produced"], reason=Reason(d["reason"]),
                   margin=math.nan if d["margin"] is None else d["margin"], overflow_at=d["overflow_at"],
                   real_produced=d["real_produced"], real_margin=d["real_margin"], position=d["position"],
                   saturated_at=d.get("saturated_at", []))

    @property
    def claim(self) -> str:
        """``expected a, got b``; for a sequence output ``at position i: expected a, got b``."""
        at = f"at position {self.position}: " if self.position is not None else ""
        return f"{at}expected {self.expected}, got {self.produced}"

    def line(self) -> str:
        """The counterexample as a summary line: the input, the claim, why it fails (where it
        saturated), its margin, and what the unquantized model answers."""
        real = (f"; the unquantized model answers {self.real_produced} (margin {self.real_margin:.4g})"
                if self.real_produced is not None else "")
        ovf = f" at {', '.join(self.overflow_at)}" if self.overflow_at else ""
        sat = "" if self.overflow_at or not self.saturated_at else f"; values saturated at {_places(self.saturated_at)}"
        return (f"counterexample #{self.index}: {self.input} -> {self.claim} "
                f"({self.reason}{ovf}, margin {self.margin:g}{sat}){real}")


@dataclass(kw_only=True)
class Result:
    verdict: Verdict
    task: dict
    construction: dict
    params: dict
    arithmetic: dict
    engine: str
    covered: int
    total: int
    start: int
    stop: int
    seconds: float
    min_margin: Optional[float]
    counterexamples: list[Counterexample]
    tightest: Optional[dict] = None  # {"index", "input"} of an input with the smallest margin
    reason: str = ""  # why the verdict is unknown
    engine_stats: dict = field(default_factory=dict)
    status: Status = Status.COMPLETE
    provenance: dict = field(default_factory=dict)  # what was verified: built-in or a file, weights_sha256
    cached: bool = False  # read from the verdict cache, not decided by this process
    checked: Optional[dict] = None  # `tasks.base.Checked` as JSON: the inputs judged among those covered
    quantized: dict = field(default_factory=dict, repr=False)  # weight name -> codes, for the dumps
    residual_rows: Optional[list[str]] = None  # the model's names of its residual rows, for traces

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def inputs_json(self) -> dict:
        """What the run covered: the inputs, the range, and what it judged."""
        return {"covered": self.covered, "total": self.total, "range": [self.start, self.stop], "checked": self.checked}

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "task": self.task, "construction": self.construction,
                "params": self.params, "arithmetic": self.arithmetic, "engine": self.engine,
                "inputs": self.inputs_json(),
                "seconds": round(self.seconds, 3), "min_margin": finite_or_none(self.min_margin),
                "tightest": self.tightest, "status": self.status, "reason": self.reason,
                "counterexamples": [c.to_json() for c in self.counterexamples],
                "engine_stats": self.engine_stats, "provenance": self.provenance, "cached": self.cached,
                "residual_rows": self.residual_rows}

    @classmethod
    def from_json(cls, d: dict) -> "Result":
        """A result read back from `to_json` (counterexamples without their traces)."""
        inputs = d["inputs"]
        start, stop = inputs["range"]
        return cls(verdict=Verdict(d["verdict"]), task=d["task"], construction=d["construction"], params=d["params"],
                   arithmetic=d["arithmetic"], engine=d["engine"], covered=inputs["covered"], total=inputs["total"],
                   start=start, stop=stop, seconds=d["seconds"], min_margin=d["min_margin"],
                   counterexamples=[Counterexample.from_json(c) for c in d["counterexamples"]],
                   tightest=d["tightest"], reason=d["reason"], engine_stats=d["engine_stats"],
                   status=Status(d["status"]), provenance=d["provenance"], cached=d.get("cached", False),
                   checked=inputs.get("checked"), residual_rows=d.get("residual_rows"))

    def summary(self) -> str:
        a = self.arithmetic
        theorem = self.construction.get("theorem")
        lines = [f"{self.verdict.upper()}{' (cached)' if self.cached else ''}: "
                 f"{self.construction.get('construction', '?')}"
                 + (f" ({theorem})" if theorem else "") + f" on {self.task['name']} "
                 + task_text(self.task)]
        error = a["quantization_error"]  # None: the run stopped before the model was quantized
        lines.append(f"  arithmetic  {format_text(a)}; quantization error "
                     + ("not computed" if error is None else f"<= {error:.3g}")
                     + (f"; saturated parameters: {', '.join(a['saturated_parameters'])}"
                        if a.get("saturated_parameters") else ""))
        lines.append("  params      " + ", ".join(f"{k}={_fmt(v)}" for k, v in self.params.items()))
        pv = self.provenance
        if pv.get("source") in ("model file", "model in memory"):
            claims = ", ".join(f"{k}={_fmt(v)}" for k, v in pv.get("claims", {}).items())
            says = "the file says" if pv["source"] == "model file" else "its info says"
            lines.append(f"  weights     sha256 {pv['weights_sha256']}" + (f"; {says} (not checked): {claims}"
                                                                          if claims else ""))
        share = "all" if self.covered == self.total else f"{self.covered / self.total:.2%} of"
        ck = self.checked or {}
        dropped = self.covered - ck["inputs"] if "inputs" in ck else 0
        ranged = f", range {self.start}..{self.stop}" if (self.start, self.stop) != (0, self.total) else ""
        if dropped:  # members without an answer (or filtered out) are covered, not checked
            what = (f"{count_text(ck['inputs'])} checked: {count_text(self.covered)} of {count_text(self.total)} "
                    f"covered ({share.replace(' of', '')}{ranged}), {count_text(dropped)} of them not inputs of the "
                    f"task;")
        else:
            what = f"{count_text(self.covered)} of {count_text(self.total)} covered ({share} inputs{ranged})"
        lines.append(f"  inputs      {what} by engine {self.engine}"
                     + (f" on {self.engine_stats['cluster']}" if "cluster" in self.engine_stats else "")
                     + f" in {self.seconds:.2f} s")
        if ck.get("positions") is not None and ck["positions"] < ck["of_positions"]:
            lines.append(f"  positions   {ck['positions']:,} of the {ck['of_positions']:,} positions read have an "
                         f"answer and were judged; the others need no answer")
        if "auto" in self.engine_stats:
            lines.append(f"  engine      chosen by auto: {self.engine_stats['auto']}")
        if self.cached:
            lines.append("  cache       read from the verdict cache: decided earlier by this same code, on these "
                         "weights, task, arithmetic and engine; the row's digest checked"
                         + (", its counterexamples failed again now" if self.counterexamples else ""))
        st = self.engine_stats
        if "decided_by_solver" in st:
            won = st.get("answered_by") or {}  # the solver that decided each case, when it was not z3 alone
            solver = (next(iter(won)) if len(won) == 1 else ", ".join(f"{who} {n}" for who, n in won.items())) \
                if won else st["solver"]
            workers, shared = st.get("workers", 1), st.get("shared_encodings", 0)  # absent from older cached rows
            lines.append(f"  cases       {st['cases']} case splits: {st['decided_by_evaluation']} decided by partial "
                         f"evaluation, {st['decided_by_solver']} by {solver} ({st['theory']}) in "
                         f"{st['solver_seconds']:.2f} s"
                         + (f" summed over {workers} processes" if workers > 1 and st["decided_by_solver"] else "")
                         + (f"; {shared} on their length's shared forward pass" if shared else ""))
        if "boxes" in st:
            margin = st["certified_margin"]
            if margin is None:
                certified = ""
            elif self.verdict == Verdict.PROVED:
                certified = f"; every margin >= {margin:g} (certified)"
            else:  # the boxes decided correct before the run stopped, not every input
                certified = f"; on the boxes decided correct, every margin >= {margin:g} (certified)"
            lines.append(f"  bounds      {st['cases']:,} case splits: {st['boxes']:,} boxes bounded, branching depth "
                         f"<= {st['max_depth']}, {st['leaves']:,} small boxes split into their "
                         f"{st['leaf_inputs']:,} inputs"
                         + certified)
        if "blocks" in st:
            lines.append(f"  aggregate   {st['blocks']:,} blocks of at most {st['largest_block']} positions; "
                         f"{st['states']:,} states of the sums, an input of each evaluated")
        if "lookup_leaves" in st:
            unmerged = st.get("unmerged_cases", 0)
            lines.append(f"  lookup      {st['lookup_leaves']:,} leaves (at most {st['largest_case_leaves']:,} a "
                         f"case) of {st.get('lookup_branches', 0):,} branches through the layers, "
                         f"{st['certificate_splits']:,} splits where a free position may weigh"
                         + (f", {unmerged:,} cases decided without merging" if unmerged else "")
                         + "; one input of each leaf evaluated")
        if "reachable_pairs" in st:
            closed = (f"closed at length {st['fixpoint_at_length']}: correct at every length, not only up to N"
                      if st["every_length"] else f"explored to length {st['lengths_explored']}")
            lines.append(f"  reach       {st['reachable_pairs']} reachable (model state, DFA state) pairs, {closed}")
        if "sample_check" in st:
            sc = st["sample_check"]
            n, of = sc["cases"], sc.get("of_cases", sc["cases"])
            which = (f"{n:,} of the {of:,} cases, drawn at random" if n < of else
                     f"{'the' if n == 1 else 'all'} {n:,} case{'' if n == 1 else 's'}")
            lines.append(f"  checked     the proof on {sc['inputs']:,} sampled inputs (corners and random members of "
                         f"{which}) on the evaluator in {sc['seconds']:.2f} s: no failure")
        if "falsified" in st:
            lines.append(f"  falsified   {falsified_text(st['falsified'])}")
        if self.min_margin is not None:
            where = f" at {elided(self.tightest['input'])}" if self.tightest else ""
            lines.append(f"  min margin  {self.min_margin:g}{where}")
        if self.reason:
            lines.append(f"  unknown     {self.reason}")
        lines += [f"  {c.line()}" for c in self.counterexamples]
        return "\n".join(lines)


def falsified_text(f: dict) -> str:
    """The falsification pass before an unknown (`runs.falsify.Falsification` as JSON) in words."""
    parts = [f"{f['from_open']:,} members of {f['open_boxes']:,} boxes the engine left open"] if f["open_boxes"] else []
    parts += [f"{f['uniform']:,} uniform draws from the inputs not covered"] if f["uniform"] else []
    parts += [f"{f['from_cases']:,} corners and members of the task's cases"] if f["from_cases"] else []
    found = (f"{f['failed']:,} fail{'s' if f['failed'] == 1 else ''}, replayed on the generic path" if f["failed"]
             else "none fails (which proves nothing)")
    stopped = ", stopped by the deadline" if f["stopped"] else ""
    return (f"the engine stopped undecided; {f['tried']:,} inputs evaluated ({'; '.join(parts) or 'none drawn'}"
            f"{stopped}; seed {f['seed']}) in {f['seconds']:.2f} s: {found}")


def elided(rendered: str, shown: int = 16) -> str:
    """A rendered input of more than 2 `shown` tokens as its first and last `shown` (the JSON keeps
    it whole): the smallest margin at N = 1024 otherwise takes a thousand tokens of a line."""
    tokens = rendered.split(" ")
    if len(tokens) <= 2 * shown:
        return rendered
    return " ".join(tokens[:shown] + [f"... ({len(tokens):,} tokens; the whole input: --json) ..."] + tokens[-shown:])


def task_text(task: dict) -> str:
    """A task's description as a verdict line shows it: its parameters, without its name, its inputs in
    words and the digests of what it read (the cache's, too long to read)."""
    return ", ".join(f"{k}={v}" for k, v in task.items() if k not in ("name", "inputs") and not k.endswith("_sha256"))


def _places(names: list[str], shown: int = 3) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def count_text(n: int) -> str:
    """An input count: with thousands separators, or in scientific notation from 10^12 on."""
    if n < 10 ** 12:
        return f"{n:,}"
    if n < 10 ** 300:
        return f"{n:.3g}"
    mantissa, exponent = f"{Decimal(n):.2e}".split("e")  # beyond float64 (sigma^N): exact, rounded alike
    return f"{mantissa}e{exponent}"


def finite_or_none(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (np.floating,)):
        return f"{float(v):.6g}"
    return str(v)
