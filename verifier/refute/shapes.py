"""Certified verdicts about every model of a shape: `verify impossible TASK --N ... --shape ...`.

In FX a model of a given shape has finitely many summaries of Alice's part, and the count is exact
arithmetic on the format; a fooling set larger than the count leaves two members with one summary,
so no model of the shape computes the task (the rectangle, or one-way, argument of
communication complexity):

* ``rnn:M,P`` -- recurrent models with M hidden units at P bits (`model.Recurrent`): a state is M
  codes after a ReLU, each in [0, 2^(P-1) - 1], so at most 2^((P-1) M) states after Alice's prefix
  (Bhattamishra et al. 2024, arXiv:2406.09347, Theorem 2; 2^(M P) as printed).  Needs a fooling set
  in which Alice holds a prefix.
* ``tf1:H,M,P`` (``,softmax`` or ``,relu``; both when not said) -- 1-layer transformers with H
  heads of value width M at P bits, any embedding, query and key width, FFN, residual, readout and
  mask: the messages of Theorem 4's protocol as `protocol.simulate` sends them, counted exactly
  (`protocol.ranges`), for two-way fooling sets; Alice's one-way messages (`protocol.messages_one_way`)
  for one-way sets, and for two-way sets when fewer.  Without --f and --rounding, the count is the
  largest over every f in 0..P and every rounding.

A model of the shape that solves the task never saturates under overflow = error (a saturation fails
its input), so the saturation flags carry nothing and are not counted.  The verdict rests on the
count and on two lemmas the tests check: the protocol equals the evaluator bit for bit
(`tests/test_lower.py`), and the fooling set is one (by brute force at small N; at larger N its
construction, which is the same code, sample-checked here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..arithmetic import ACCUMULATES, ROUNDINGS, FixedPoint
from ..support.errors import InputError, InternalError
from ..verdicts import Verdict as RunVerdict  # shapes has its own Verdict: impossible or open
from . import fooling, protocol

MAX_P = 31
SMALLEST_LIMIT = 1 << 17  # the largest N the smallest impossible N is looked for up to


@dataclass(frozen=True)
class Shape:
    kind: str  # rnn | tf1
    width: int
    p: int
    heads: int = 1
    attention: Optional[str] = None  # tf1: softmax, relu, or None for both

    @property
    def label(self) -> str:
        if self.kind == "rnn":
            return f"rnn:{self.width},{self.p}"
        return f"tf1:{self.heads},{self.width},{self.p}" + (f",{self.attention}" if self.attention else "")

    def describe(self) -> str:
        if self.kind == "rnn":
            return f"recurrent model with {self.width} hidden unit{'s' if self.width > 1 else ''} at {self.p} bits"
        att = f"{self.attention} " if self.attention else ""
        return (f"1-layer transformer with {self.heads} {att}head{'s' if self.heads > 1 else ''} of value width "
                f"{self.width} at {self.p} bits")


def parse_shape(text: str) -> Shape:
    """``rnn:M,P`` or ``tf1:H,M,P`` with an optional ``,softmax`` or ``,relu``."""
    kind, _, rest = text.partition(":")
    parts = rest.split(",")
    try:
        if kind == "rnn" and len(parts) == 2:
            shape = Shape("rnn", int(parts[0]), int(parts[1]))
        elif kind == "tf1" and len(parts) in (3, 4):
            att = parts[3] if len(parts) == 4 else None
            if att not in (None, "softmax", "relu"):
                raise ValueError
            shape = Shape("tf1", int(parts[1]), int(parts[2]), int(parts[0]), att)
        else:
            raise ValueError
    except ValueError:
        raise InputError(f"--shape must be rnn:M,P or tf1:H,M,P[,softmax|relu] (e.g. rnn:8,4, tf1:2,4,8), "
                         f"got {text!r}") from None
    if shape.width < 1 or shape.heads < 1 or not 2 <= shape.p <= MAX_P:
        raise InputError(f"--shape {text}: widths and heads must be >= 1 and 2 <= P <= {MAX_P}")
    return shape


@dataclass
class Count:
    """How many summaries a model of the shape can produce, and what was counted."""

    value: int
    how: str


def _formats(shape: Shape, f: Optional[int], rounding: Optional[str]) -> list[tuple[int, str]]:
    fs = [f] if f is not None else list(range(shape.p + 1))
    return [(g, r) for g in fs for r in ([rounding] if rounding else ROUNDINGS)]


def count(shape: Shape, size: fooling.Size, f: Optional[int] = None, rounding: Optional[str] = None,
          accumulate: str = "product") -> Optional[Count]:
    """The number of summaries every model of the shape has on the fooling set's Alice parts (None:
    no bound of this kind, e.g. a recurrent model and a set where Alice holds no prefix)."""
    if accumulate not in ACCUMULATES:
        raise InputError(f"accumulate must be one of {', '.join(ACCUMULATES)}")
    p = shape.p
    if shape.kind == "rnn":
        if not size.contiguous:
            return None
        hi = FixedPoint(p, 0).hi
        return Count((hi + 1) ** shape.width, f"state codes after Alice's prefix: {shape.width} ReLU outputs, each one "
                                              f"of the {hi + 1} codes in [0, 2^{p - 1} - 1]: (2^{p - 1})^{shape.width}")
    best, how = None, ""
    for att, g, r in _choices(shape, f, rounding):
        value, what = _one_format(shape, size, att, g, r, accumulate)
        if best is None or value > best:
            best, how = value, f"{what} ({att}, f={g}, rounding={r}, accumulate={accumulate}: the largest count)"
    return Count(best, how)


def _choices(shape: Shape, f: Optional[int], rounding: Optional[str]) -> list[tuple[str, int, str]]:
    return [(att, g, r) for att in ([shape.attention] if shape.attention else ["softmax", "relu"])
            for g, r in _formats(shape, f, rounding)]


def _one_format(shape: Shape, size: fooling.Size, att: str, g: int, r: str, accumulate: str) -> tuple[int, str]:
    p = shape.p
    two = None
    if size.two_way:
        two = protocol.transcripts_two_way(protocol.ranges(p, g, r, accumulate, att, size.alice, size.bob),
                                           shape.width, shape.heads, size.queries, att)
    if two is not None and math.log2(two) < protocol.log2_one_way(p, g, r, accumulate, att, size.alice, shape.width,
                                                                   shape.heads, size.queries) - 1:
        return two, "transcripts of Theorem 4's protocol"
    one = protocol.messages_one_way(p, g, r, accumulate, att, size.alice, shape.width, shape.heads, size.queries)
    if two is not None and two < one:
        return two, "transcripts of Theorem 4's protocol"
    return one, "Alice's one-way messages"


def excludes(shape: Shape, size: fooling.Size, f: Optional[int], rounding: Optional[str], accumulate: str) -> bool:
    """Is the count below the set, for every format?  In float64 log2 (lgamma) where the two sides
    differ by more than 10^-6 of their size plus a bit (far beyond float64's error), else in integers."""
    target = math.log2(size.members)
    if shape.kind == "rnn":
        c = count(shape, size, f, rounding, accumulate)
        return c is not None and c.value < size.members
    for att, g, r in _choices(shape, f, rounding):
        lg = protocol.log2_one_way(shape.p, g, r, accumulate, att, size.alice, shape.width, shape.heads, size.queries)
        if size.two_way:
            rg = protocol.ranges(shape.p, g, r, accumulate, att, size.alice, size.bob)
            lg = min(lg, math.log2(protocol.transcripts_two_way(rg, shape.width, shape.heads, size.queries, att)))
        if lg > target + 1 + 1e-6 * target:
            return False
        if lg > target - 1 - 1e-6 * target and _one_format(shape, size, att, g, r, accumulate)[0] >= size.members:
            return False
    return True


@dataclass
class Verdict:
    verdict: str  # impossible | open (the count does not exclude the shape)
    task: str
    N: int
    shape: Shape
    members: int
    count: Optional[Count]
    fooling: str  # the set and its check
    smallest: Optional[int] = None
    searched: Optional[int] = None  # the smallest N was looked for up to this N
    below: Optional[str] = None  # bounded synthesis over the whole dataset, when asked for

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "impossible" else 3

    def lines(self) -> list[str]:
        s, c = self.shape, self.count
        head = (f"IMPOSSIBLE: no {s.describe()} computes {self.task} at N = {self.N}" if self.verdict == "impossible"
                else f"OPEN: the count does not exclude a {s.describe()} on {self.task} at N = {self.N}")
        out = [head, f"  fooling set  {self.fooling}"]
        if c is None:
            out.append("  count        none: a recurrent model's state summarizes a prefix, and Alice holds none here")
        else:
            rel = "<" if c.value < self.members else ">="
            out.append(f"  count        {_big(c.value)} {rel} {_big(self.members)} members: {c.how}")
            out.append(f"  bits         log2 {math.log2(c.value):.1f} against log2 {math.log2(self.members):.1f}")
        if self.smallest is not None:
            out.append(f"  smallest N   {self.smallest}: the first N at which the count falls below the fooling set")
        elif self.searched:
            out.append(f"  smallest N   none up to {self.searched:,}: the count stays at or above the fooling set")
        if self.below:
            out.append(f"  synthesis    {self.below}")
        return out

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "task": self.task, "N": self.N, "shape": self.shape.label,
                "members": str(self.members), "count": None if self.count is None else str(self.count.value),
                "counted": None if self.count is None else self.count.how, "fooling_set": self.fooling,
                "smallest_N": self.smallest, "below": self.below}


def _big(n: int) -> str:
    return f"{n:,}" if n < 10 ** 15 else f"2^{math.log2(n):.1f}"


USER_TASKS = ("reference", "dataset")  # a greedy fooling set, built at each N (no closed form)


def impossible(task_name: str, N: int, shape: Shape, f: Optional[int] = None, rounding: Optional[str] = None,
               accumulate: str = "product", smallest: bool = True, synthesis_timeout: Optional[float] = None,
               **options) -> Verdict:
    """The verdict at N, and the smallest N at which the count certifies impossibility."""
    from ..tasks import canonical, make_task
    name = canonical(task_name)
    task = make_task(name, N=N, **options)
    if name in USER_TASKS:
        built = fooling.build(task)
        size = fooling.size_of(built)
    else:
        size = fooling.size(name, N, **options)
        if size is None:
            raise InputError(f"{name} has no fooling set at N = {N} (tasks with one: {', '.join(fooling.BUILDERS)}, "
                             f"and user tasks: {', '.join(USER_TASKS)})")
        built = fooling.build(task, limit=4096)
        if fooling.size_of(built) != size:
            raise InputError(f"internal: the fooling set built at N = {N} has not the size its closed form gives")
    which = "" if len(built.A) == built.size else f" (a random sample of {len(built.A):,} Alice parts, every Bob part)"
    checked = (f"checked by brute force on all {len(built.A) * len(built.B):,} combinations of an Alice and a Bob "
               f"part{which}"
               if len(built.A) * len(built.B) <= 1 << 18 and not fooling.check(task, built) else
               f"{fooling.sample_check(task, built, 2000, np.random.default_rng(0)):,} random pairs of members "
               f"crossed and checked")
    c = count(shape, size, f, rounding, accumulate)
    verdict = "impossible" if c is not None and c.value < size.members else "open"
    limit = N if name in USER_TASKS else SMALLEST_LIMIT
    first = smallest_impossible(name, shape, f, rounding, accumulate, limit, **options) if smallest else None
    out = Verdict(verdict, name, N, shape, size.members, c, f"{built.describe()}; {checked}", first,
                  limit if smallest else None)
    if synthesis_timeout is not None:
        out.below = synthesis_check(task, shape, f, rounding, accumulate, synthesis_timeout,
                                    None if c is None else c.value, built)
    return out


def synthesis_check(task, shape: Shape, f: Optional[int], rounding: Optional[str], accumulate: str,
                    timeout: float, count: Optional[int], fs: fooling.FoolingSet) -> str:
    """Bounded synthesis at tiny sizes: a model of the shape that answers every input of the task
    right (proved on every input by the engines), or none (UNSAT), or open.  Recurrent shapes: the
    recurrent synthesizer (z3).  1-layer shapes: the family of `synthesis` (one-hot embeddings, ReLU
    heads, a subset of the shape), on the whole dataset when it is small and read at the last
    position, else on the fooling set's inputs (every Alice part with every Bob part, the answer
    at the position read).  A model where the count forbids one is an internal error: on the whole
    dataset when the count is below the set's size, on the fooling set's inputs when it is below
    the Alice parts used."""
    from ..runs import api
    from ..smt import solvers
    from . import synthesis
    fx = FixedPoint(shape.p, f, rounding or "floor", "saturate", accumulate)
    solver = "bitwuzla" if "bitwuzla" in solvers.installed() else "z3"
    try:
        if shape.kind == "rnn":
            solver, what, parts = "z3", "the whole dataset", fs.size
            s = synthesis.synthesize_recurrent(task, shape.width, fx, timeout)
        elif shape.attention == "softmax":
            return "open: bounded synthesis searches 1-layer models with ReLU heads only"
        elif task.total <= synthesis.MAX_DATASET and not task.per_position:
            what, parts = "the whole dataset", fs.size
            s = synthesis.synthesize_dataset(task, shape.heads, shape.width, fx, timeout, solver)
        else:
            rows = fs.inputs(np.repeat(np.arange(len(fs.A)), len(fs.B)), np.tile(np.arange(len(fs.B)), len(fs.A)))
            assert fs.position == rows.shape[1] - 1  # the family reads the last position
            answers, valid = fooling.answers_at(task, rows, fs.position)
            parts = len(fs.A)
            what = ("the fooling set's inputs (every Alice part with every Bob part, "
                    f"the answer at position {fs.position})")
            s = synthesis.synthesize_inputs(task, rows[valid].tolist(), answers[valid].tolist(), shape.heads,
                                            shape.width, fx, timeout, solver)
    except InputError as exc:
        return f"open: {exc}"
    family = "" if shape.kind == "rnn" else " with one-hot embeddings and ReLU heads"
    where = f"[{fx.label()}, {s.members} inputs, {s.shape['parameters']} parameters, {solver}, {s.seconds:.1f} s]"
    if s.verdict == "impossible":
        return f"bounded synthesis over {what}: no model of the shape{family} gets every input right (UNSAT) {where}"
    if s.verdict == "unknown":
        return f"open: {solver} did not decide within {timeout:g} s {where}"
    if count is not None and count < parts:
        raise InternalError(f"the count says no {shape.describe()} computes {task.name} at N = {task.N}, yet bounded "
                            f"synthesis found one that gets {what} right {where}")
    if what != "the whole dataset":
        return f"bounded synthesis found a model of the shape that gets {what} right {where}"
    if shape.kind == "rnn":
        r = api.run(api.build_problem(task.name, model=s.model, arith=fx, **synthesis.task_options(task)))
        s.whole_dataset = f"{r.verdict} on all {r.total:,} inputs by {r.engine}"
        if r.verdict != RunVerdict.PROVED:
            raise InternalError(f"the synthesized model does not solve {task.name}: {s.whole_dataset}")
    return f"bounded synthesis found a model of the shape that solves the task, {s.whole_dataset} {where}"


def smallest_impossible(name: str, shape: Shape, f: Optional[int] = None, rounding: Optional[str] = None,
                        accumulate: str = "product", limit: int = SMALLEST_LIMIT, **options) -> Optional[int]:
    """The smallest N <= limit at which the count falls below the fooling set (None: none up to it).
    The count grows polynomially in N and the set exponentially, so they cross once: found by
    doubling then bisection, then checked exactly at N and below it.  A user task's greedy set has
    no closed form: every N up to `limit` in turn, while the set can be built."""
    if name in USER_TASKS:
        return _smallest_by_scan(name, shape, f, rounding, accumulate, limit, **options)

    def excluded(N: int) -> bool:
        s = fooling.size(name, N, **options) or fooling.size(name, N + 1, **options)
        return s is not None and excludes(shape, s, f, rounding, accumulate)

    lo, hi = 1, 2
    while not excluded(hi):
        lo, hi = hi, hi * 2
        if hi > limit:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if excluded(mid) else (mid, hi)
    while fooling.size(name, hi, **options) is None:  # an N the task has (even, say)
        hi += 1
    return hi


def _smallest_by_scan(name: str, shape: Shape, f: Optional[int], rounding: Optional[str], accumulate: str,
                      limit: int, **options) -> Optional[int]:
    from ..tasks import make_task
    for N in range(2, limit + 1):
        try:
            size = fooling.size_of(fooling.build(make_task(name, N=N, **options)))
        except InputError:  # no input of that length, or too many parts to build the set
            continue
        if excludes(shape, size, f, rounding, accumulate):
            return N
    return None
