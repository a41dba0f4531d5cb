"""The bounds engine: exact interval bounds over boxes of inputs, with branching (docs/bounds-engine.md).

A **box** is one input length and, per position, a set of tokens; a task's case split is a box.
Inside a box of a one-layer model the readout at the last position is

    readout(FFN(x0_q + W_O sum_j R(a_j v_j)))

where the query x0_q is fixed (the engine first splits the last position into single tokens),
logit s_j and value v_j depend on position j's token only, and every later step (saturation,
rounding, ReLU, the exp table, a linear map split by the signs of its weights) is monotone.  So
per-position minima and maxima of s_j and v_j, taken over the token classes of `verifier.layer0`
(exact partial evaluation, once per model), bound every value of the box from below and above,
exactly in the FX arithmetic: every bound is a code the evaluator could produce.  Softmax needs
the care the issue asked for: a weight rises with its own logit and falls with the others', so
a_j is bounded with the max taken over the *other* positions (top two) and with the rest of Z
taken apart from e_j (docs/bounds-engine.md, "Softmax").  When every logit of a box is a single
value the bounds are the exact values.

A box is **correct** when the answer is the same on all of it (the task says which position the
answer reads: `Case.answer_at`, and that position holds one token) and the lower bound of the
readout margin is positive, with no saturation possible under ``overflow = error``; it **fails**
when the upper bound of the margin is not positive (its first member is then a counterexample,
evaluated on the evaluator).  Otherwise the engine branches: on the position the answer reads,
then on the position whose logit bounds are widest, then on the one whose contribution is widest,
into its single tokens.  A branch on a position whose logit does not depend on its token leaves
every weight bound as it was, so its children are computed from the parent's sums (a table over
the position's tokens) instead of anew.  A box of at most `LEAF_INPUTS` inputs is split into its
inputs, whose bounds are their exact values (the batched evaluator decides them instead when the
task does not say where the answer is, and decides any single input the bounds leave open), so
the engine is complete.

What depends on the arithmetic (the softmax weights, a position's term, a head's sums, the
threshold, a value's rank) is a method of the arithmetic object: `Fixed` on a grid, `FloatArith`
in a float format, whose head sums are sums in index order with every partial sum rounded, bounded
through their error (docs/bounds-engine.md, "Floating-point formats").

Cases of one length are processed together, as (boxes x positions) arrays; nothing loops over
inputs.  The open boxes are kept depth first, and each round takes as many as fit in MEMORY
by an estimate of its arrays from the sizes (`_Footprint`): the memory stays bounded however
many boxes the branching makes, and a box that does not fit alone is refused (`TooLarge`, which
auto answers with the next engine) before it is allocated (docs/bounds-engine.md, "Memory").
Supported: one layer (softmax or ReLU attention, any heads, residual or not, FFN or not),
a readout at the last position, every rounding, overflow and accumulation rule.

Two layers, when the first is local (`verifier.locality`: causal softmax attention whose keys
outside a window of the last width + 1 positions weigh exactly 0, decided from the layer-0 logit
tables): the first layer's output is a table over (position, window of tokens), computed by the
evaluator's own layer, and the second layer is bounded as the first is, with windows for tokens:
a position's classes are those of every token combination of its window's token sets (a superset,
exact when the window holds single tokens).  The query's window and the answer's position are
split into single tokens first.
Two layers whose second reads the first at the last position only (`_not_query_only`: its keys
and values read columns the first leaves as they are; MQAR, nearest neighbour), local or not: the
second layer's keys and values are tables over (position, token); the first layer's output at the
query is bounded like a one-layer readout's input, and the second layer is bounded once per code
its query's columns take over the box (`_second_layer`).  The task's `answer_cases` fix the answer.
A readout at every position of a causal model is decided at the last position of every length
(the task's `last_position_cases`), the first length's inputs on the evaluator at every position
(docs/bounds-engine.md, "Layers after the first").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Optional, Sequence, cast

import numpy as np

from ..arithmetic import Arithmetic, Fixed, any_per_row, lowest
from ..evaluator import Evaluator, fitting_evaluator
from ..floats import FloatArith
from ..int8 import Int8Arith
from ..layer0 import ClassTable, class_table, embedding_overflow, keys_from_tokens, score_table, state_table
from ..locality import Window, first_layer_window, window_states
from ..model import Model, Recurrent
from ..support.budget import Deadline, TimedOut, TooLarge, fmt_bytes, require_memory
from ..support.errors import InternalError
from ..tasks import Case
from ..tasks.base import Task, case_splits
from ..tasks.product import product_rows
from ..verdicts import Status
from .base import EngineResult, Found, Problem, RunOptions, Tick
from .cost import products

FIRST_LENGTH_INPUTS = 1 << 12  # a readout at every position: the inputs of the first length, all evaluated
LEAF_INPUTS = 256  # a box with at most this many inputs is split into its inputs at once
BATCH_POSITIONS = 1 << 20  # boxes x positions of one batch
POINTS_PER_ROW = 4096  # a head-output box of at most this many codes is decided point by point
POINTS_PER_CALL = 1 << 18
LEAF_TABLES_AFTER = 1 << 14  # leaf inputs evaluated before the evaluator's layer-0 tables are worth building
MEMORY = 128 << 20  # the working set of a run's boxes (a constant, so that the boxes of a round, and the
# counterexample found first, do not depend on the machine's load); more buys no speed
OPEN_BOXES = 1 << 10  # open boxes a run that stopped hands on, for the falsification pass (`runs.falsify`)
ROUND_BOXES = 1 << 13  # boxes of a round at most: enough to vectorise, few enough to reach the leaves soon
WINDOW_INDEX = 1 << 21  # (position, window of token sets) pairs a batch may index (two layers): 16 MiB
PRODUCT_TEMPS = 6  # arrays the size of a linear map's products alive at once (`Fixed._dot`, `_lin`)
QUERY_POINTS = 4  # a non-local first layer: its output at the query, on the columns the second layer's
# query reads, taking at most this many codes over a box is decided code by code (else the box branches)
SECOND_QUERIES = 1 << 12  # second-layer query codes whose logit rows a run keeps
COLUMN_POINTS = 64  # an FFN column that only its own units read and write: its output is found at every
# code of its input's bounds, up to this many


@dataclass
class _Head:
    q: Optional[ClassTable]  # None: a second layer's head, whose queries are found per box
    k: ClassTable
    v: ClassTable
    logits: np.ndarray  # (q classes, k classes) codes
    logit_ovf: np.ndarray


@dataclass
class _Model:
    """The quantized model as the engine reads it: layer 0 as class tables, once per run."""

    ev: Evaluator  # the generic-path evaluator: the quantized weights and their sparse plans
    heads: list[_Head]
    pair_ovf: Optional[np.ndarray]  # overflow = error: (L_max, V) the pair saturates its embedding,
    # key or value, or uses a saturated parameter
    always: bool  # overflow = error and a saturated parameter that every input uses
    window: Optional[Window] = None  # two layers: the first layer's window (the tables are over its codes)
    states: Optional[np.ndarray] = None  # two layers: the first layer's output (L_max, window codes, d)
    second: Optional[list[_Head]] = None  # two layers, the first not local: the second layer's keys and
    # values over (position, token) (they read columns the first layer leaves as they are); no query table
    query_cols: Optional[np.ndarray] = None  # the columns the second layer's queries read

    @classmethod
    def build(cls, ev: Evaluator, deadline: Optional[Deadline] = None, query_only: bool = False) -> "_Model":
        """Layer 0's class tables; for two layers, the first layer's window and output table, and
        the last layer's class tables over (position, window code) (`verifier.locality`); or with
        `query_only` (`_not_query_only_problem`), the second layer's keys and values over (position,
        token)."""
        q, fx = ev.q, _intervals(ev.arith)
        heads = _layer0_heads(ev, deadline)
        window = states = second = query_cols = None
        if query_only:
            second = []
            for h in q.layers[1].heads:  # the logits are per round: the queries are found per box
                tk, tv = (class_table(fx, q.E, q.P, q.P_mask, getattr(h, W), getattr(h, b), deadline)
                          for W, b in h.MAPS[1:])
                second.append(_Head(None, tk, tv, np.zeros((0, 0), np.int64), np.zeros((0, 0), bool)))
            query_cols = np.flatnonzero(np.any([np.any(h.W_Q != 0, axis=0) for h in q.layers[1].heads], axis=0))
            return cls(ev, heads, None, False, None, None, second, query_cols)
        if len(q.layers) > 1:
            window, why = _first_window(ev, heads)
            if window is None:
                raise InternalError(f"the first layer is not local: {why}")
            states, state_ovf = window_states(ev, window)
            heads = []
            for h in q.layers[-1].heads:
                tq, tk, tv = (state_table(fx, states, getattr(h, W), getattr(h, b), deadline) for W, b in h.MAPS)
                heads.append(_Head(tq, tk, tv, *score_table(fx, tq.values, tk.values, deadline)))
        pair_ovf, always = None, False
        if fx.overflow == "error":
            pair_ovf = state_ovf if states is not None else embedding_overflow(fx, q.E, q.P, q.P_mask, deadline)
            for h in heads:
                pair_ovf |= h.k.ovf[h.k.rid] | h.v.ovf[h.v.rid]
            use = ev.saturated_use
            if use is not None:
                own = np.arange(pair_ovf.shape[1]) % len(q.vocab)  # a column's token (its window's last digit)
                pair_ovf |= use.token[own][None, :] | (use.position[:, None] & q.P_mask[own][None, :])
                always = bool(use.always)
        return cls(ev, heads, pair_ovf, always, window, states)


def _intervals(arith: Arithmetic) -> "Fixed | FloatArith":
    """The arithmetic, one that has interval operations (`unsupported` refused the others)."""
    if not isinstance(arith, (Fixed, FloatArith)):
        raise InternalError(f"the bounds engine has no interval operations for {arith.label()}")
    return arith


def _layer0_heads(ev: Evaluator, deadline: Optional[Deadline] = None) -> list[_Head]:
    """Layer 0's heads as class tables over (position, token), with their logit tables."""
    q, fx = ev.q, _intervals(ev.arith)
    heads = []
    for h in q.layers[0].heads:
        tq, tk, tv = (class_table(fx, q.E, q.P, q.P_mask, getattr(h, W), getattr(h, b), deadline) for W, b in h.MAPS)
        heads.append(_Head(tq, tk, tv, *score_table(fx, tq.values, tk.values, deadline)))
    return heads


def _not_certified(model: Model) -> Optional[str]:
    """Why a first layer's locality is not decided here, or None."""
    first = model.layers[0]
    if first.attention != "softmax" or not first.causal:
        return "its first layer is not causal softmax attention (only that is certified local)"
    return None


def _not_query_only(model: Model) -> Optional[str]:
    """Why a two-layer model's second layer is not one whose keys and values read only columns the
    first layer leaves as they are (`layer0.keys_from_tokens`), or None.  Then the second layer's
    keys and values are functions of (position, token), as layer 0's are, and only its query, at
    the last position, reads the first layer's output."""
    if len(model.layers) != 2:
        return f"it has {len(model.layers)} layers, not two"
    if model.readout.positions != "last":
        return "its readout is not at the last position only"
    return keys_from_tokens(model)


def _not_query_only_problem(problem: Problem) -> Optional[str]:
    """`_not_query_only`, and what the problem adds: the overflow rule, cases that fix the answer."""
    if not isinstance(problem.model, Model):
        return "a recurrent model has no layers"
    why = _not_query_only(problem.model)
    if why is None and problem.arith.overflow == "error":
        why = "under overflow = error the first layer's saturations at every position would count"
    if why is None and getattr(problem.task, "answer_cases", None) is None:
        why = f"task {problem.task.name} has no cases that fix the answer's position"
    return why


def _first_window(ev: Evaluator, heads: list[_Head]) -> tuple[Optional[Window], str]:
    """The first layer's window (`locality.first_layer_window`), or None and why not."""
    why = _not_certified(ev.q)
    if why is not None:
        return None, why
    return first_layer_window(_intervals(ev.arith), [cast(ClassTable, h.q) for h in heads], [h.k for h in heads],
                              [h.logits for h in heads], [h.logit_ovf for h in heads], ev.q.max_len)


@dataclass
class _Boxes:
    """Boxes of one length L: per position a domain id (>= 0, into the batch's domains) or one
    token t (as -1 - t); the case of each box; how many branchings made it; and, for a box whose
    positions 0..L-2 are one of the batch's shared prefixes (the cases' own boxes), its row."""

    dom: np.ndarray  # (B, L)
    case: np.ndarray  # (B,)
    depth: np.ndarray  # (B,)
    prefix: np.ndarray  # (B,) -1: the box has its own positions

    def __len__(self) -> int:
        return len(self.case)

    def take(self, rows: np.ndarray) -> "_Boxes":
        return _Boxes(self.dom[rows], self.case[rows], self.depth[rows], self.prefix[rows])

    @staticmethod
    def concat(a: "_Boxes", b: "_Boxes") -> "_Boxes":
        return _Boxes(*(np.concatenate([getattr(a, k), getattr(b, k)]) for k in ("dom", "case", "depth", "prefix")))


@dataclass
class _Open:
    """Boxes still to decide, from row `at` on, with the running sum of their estimated bytes."""

    boxes: _Boxes
    cum: np.ndarray  # (B,) float
    at: int = 0

    @property
    def nbytes(self) -> int:
        b = self.boxes
        return b.dom.nbytes + b.case.nbytes + b.depth.nbytes + b.prefix.nbytes + self.cum.nbytes

    def fitting(self, room: float) -> int:
        """How many of the next boxes fit in `room` bytes together."""
        base = self.cum[self.at - 1] if self.at else 0.0
        return int(np.searchsorted(self.cum, base + room, side="right")) - self.at

    def take(self, n: int) -> _Boxes:
        a, self.at = self.at, self.at + n
        b = self.boxes
        return _Boxes(b.dom[a:self.at], b.case[a:self.at], b.depth[a:self.at], b.prefix[a:self.at])

    def keep(self, rows: np.ndarray) -> "_Open":
        """The boxes `rows` (of those not taken yet), with their bytes."""
        cost = np.diff(self.cum, prepend=0.0)[self.at:][rows]
        return _Open(self.boxes.take(self.at + rows), np.cumsum(cost))


@dataclass
class _Footprint:
    """What a round's arrays take, estimated from the sizes (generously: within a small factor), per
    box and per input: the boxes of a round are as many as fit in MEMORY by it."""

    heads: int
    mv: int  # the widest value map
    row: float  # bytes per row of the readout's bounds (`_post`): its widest linear map's products, its vectors

    @classmethod
    def of(cls, model: Model, at: int = -1) -> "_Footprint":
        """From the model's sizes (as given or quantized: a zero weight is skipped either way), for the
        layer `at` (the last, or a non-local first one)."""
        layer, ro = model.layers[at], model.readout
        maps = [layer.W_O, ro.W_U] + ([layer.W1, layer.W2] if layer.has_ffn else [])
        mv = max(h.W_V.shape[0] for h in layer.heads)
        width = len(layer.heads) * mv + model.d + (layer.W1.shape[0] if layer.has_ffn else 0) + ro.W_U.shape[0]
        return cls(len(layer.heads), mv, 8.0 * (PRODUCT_TEMPS * max(products(W) for W in maps) + 8 * width))

    def box(self, L: int, classes: int, branch: int, vclasses: Optional[int] = None) -> float:
        """A box of length L, with at most `classes` key or value classes at a position (`vclasses`
        value classes, when given apart) and `branch` children: per head, its positions' logit,
        weight and term bounds; one head's class ids,
        logits and value gathers; its children with their table keys; the readout's rows of it and
        of its children."""
        H, mv = self.heads, self.mv
        kept = H * L * (8 + 4 * mv)
        temp = L * (16 + 4 * classes + 2 * (classes if vclasses is None else vclasses) * mv)
        kids = branch * (L + 8 + 3 * (4 * H * mv + 2 * H + 4))
        return 8.0 * (kept + temp + kids) + self.row * (1 + branch)

    def input(self, L: int) -> float:
        """An input of a box split into its inputs: its tokens, and a box of single tokens."""
        return self.box(L, 1, 0) + 8.0 * 3 * L


@dataclass
class _HeadBounds:
    """One head over a set of boxes.  Logit bounds per position (one array when they are exact);
    the positions whose weight may be positive (the others add exactly 0), with their weight
    and term bounds; and the heads' raw sums (before the final rounding and saturation: the
    arithmetic's `sum_terms`)."""

    slo: np.ndarray  # (B, L)
    shi: np.ndarray
    b: np.ndarray  # (K,) box, position of each entry
    j: np.ndarray
    alo: np.ndarray  # (K,)
    ahi: np.ndarray
    tlo: np.ndarray  # (K, mv) term bounds
    thi: np.ndarray
    raw: tuple  # arrays (B, ...)

    @property
    def exact(self) -> bool:
        return self.slo is self.shi

    def take(self, rows: np.ndarray, B: int) -> "_HeadBounds":
        where = np.full(B, -1, dtype=np.int64)
        where[rows] = np.arange(len(rows))
        keep = np.flatnonzero(where[self.b] >= 0)
        slo = self.slo[rows]
        return _HeadBounds(slo, slo if self.exact else self.shi[rows], where[self.b[keep]], self.j[keep],
                           self.alo[keep], self.ahi[keep], self.tlo[keep], self.thi[keep],
                           tuple(r[rows] for r in self.raw))

    def at(self, j: np.ndarray) -> tuple[np.ndarray, ...]:
        """Per box, the weight and term bounds at its position j (0 where the weight is 0)."""
        B, mv = len(self.slo), self.tlo.shape[1]
        hit = np.flatnonzero(self.j == j[self.b])
        alo, ahi = np.zeros(B, self.alo.dtype), np.zeros(B, self.ahi.dtype)
        tlo, thi = np.zeros((B, mv), self.tlo.dtype), np.zeros((B, mv), self.thi.dtype)
        rows = self.b[hit]
        alo[rows], ahi[rows], tlo[rows], thi[rows] = self.alo[hit], self.ahi[hit], self.tlo[hit], self.thi[hit]
        return alo, ahi, tlo, thi


@dataclass
class _Attention:
    heads: list[_HeadBounds]
    ovf: np.ndarray  # (B,) a saturation is possible (overflow = error)

    def take(self, rows: np.ndarray) -> "_Attention":
        B = len(self.ovf)
        return _Attention([h.take(rows, B) for h in self.heads], self.ovf[rows])


@dataclass
class _Stats:
    boxes: int = 0
    leaves: int = 0  # boxes enumerated on the evaluator
    leaf_inputs: int = 0
    max_depth: int = 0
    largest_round: int = 0  # boxes
    beyond_memory: int = 0  # rounds of one box decided beside open boxes that left less than its size of MEMORY
    certified_margin: Optional[float] = None  # the smallest lower bound of a margin that decided a box

    def margin(self, m: np.ndarray) -> None:
        if len(m):
            low = float(m.min())
            if self.certified_margin is None or low < self.certified_margin:
                self.certified_margin = low


class Bounds:
    name = "bounds"
    symbolic = True

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        model = problem.model
        if isinstance(model, Recurrent):
            return "it bounds attention; a recurrent model has none"
        if isinstance(problem.arith, Int8Arith):  # no interval operations (`Fixed`, `FloatArith` have theirs)
            return "int8 with scales has no interval bounds here (the exhaustive engine decides int8)"
        if len(model.layers) > 2:
            return f"it bounds at most two layers (the first one local); the model has {len(model.layers)}"
        other = _not_query_only_problem(problem) if len(model.layers) == 2 else None
        if other is not None:
            why = _not_certified(model)  # before any table is built
            if why is None:
                ev = Evaluator(model, problem.arith, tables=False)
                why = _first_window(ev, _layer0_heads(ev, opts.deadline))[1] or None
            if why is not None:
                return (f"the first of its two layers is not local: {why}; and the second does not read it at the "
                        f"last position only: {other}")
        if model.readout.positions != "last":
            if not all(layer.causal for layer in model.layers):
                return "it bounds a readout at every position of a causal model only; this one is not causal"
            if getattr(type(problem.task), "last_position_cases", None) is None:  # a wrapper's forward would not do
                return f"task {problem.task.name} has no cases that fix the answer at the last position"
            if next(iter(case_splits(problem.task))).count > FIRST_LENGTH_INPUTS:
                return (f"its inputs of the first length number more than {FIRST_LENGTH_INPUTS} (they are "
                        f"evaluated, every position, for the positions no last position covers)")
        elif problem.task.cases is None:
            return f"task {problem.task.name} has no case splits"
        if not opts.whole(problem.task.total):
            return "--start/--stop select inputs by enumeration; the bounds engine decides whole cases"
        smallest = _Footprint.of(model).box(problem.task.max_len, 1, 1)
        if smallest > MEMORY:
            return (f"one box of length {problem.task.max_len} needs about {fmt_bytes(smallest)} (estimated from the "
                    f"sizes); the engine works within {fmt_bytes(MEMORY)}")
        return None

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult:
        t0 = time.monotonic()
        task = problem.task
        result = EngineResult(Status.COMPLETE, 0, [])
        stats = _Stats()
        done = 0
        run: Optional[_Run] = None
        pending: Optional[list[Case]] = None  # the batch being decided
        try:
            require_memory(MEMORY, "the bounds engine's working set")
            run = _Run(problem, opts, stats)
            first = run.first_length() if problem.model.readout.positions != "last" else []
            result.found = first[:opts.max_counterexamples]
            for batch in _batches(_cases(problem) if not first else iter(())):
                opts.deadline.check()
                pending = batch
                if run.decide(batch):
                    break
                result.covered += sum(c.count for c in batch)
                done += len(batch)
                pending = None
                if opts.progress:
                    opts.progress(Tick(result.covered, task.total, done, None, batch[-1].name))
        except TimedOut:
            result.status = Status.TIMEOUT
        except KeyboardInterrupt:
            result.status = Status.INTERRUPTED
        case = None
        # the cases of the batch decided, and its failures
        if pending is not None and run is not None and run.cases is pending:
            # cases fixing the last position's answer cover the inputs of their length together
            k = run.settled() if problem.model.readout.positions == "last" else 0
            result.covered += sum(c.count for c in pending[:k])
            done += k
            ordered = sorted(run.found, key=lambda cf: (cf[0], cf[1].index))
            result.found = [f for _, f in ordered][:opts.max_counterexamples]
            if result.status != Status.COMPLETE and k < len(pending):
                case = pending[k].name
                result.open = run.open_boxes(OPEN_BOXES)
        elif pending is not None:
            case = pending[0].name
        result.stats = {"cases": done, "boxes": stats.boxes, "leaves": stats.leaves, "leaf_inputs": stats.leaf_inputs,
                        "max_depth": stats.max_depth, "largest_round": stats.largest_round,
                        "beyond_memory": stats.beyond_memory, "certified_margin": stats.certified_margin,
                        "unfinished_case": case, "seconds": time.monotonic() - t0}
        return result


def _cases(problem: Problem) -> Iterator[Case]:
    """The task's case splits, or, when it has them, its cases split so that each fixes the answer's
    position (`answer_cases`: MQAR, nearest neighbour); for a readout at every position of a causal
    model, cases of the answer
    at the last position of every length (`last_position_cases`).  The output at position i depends
    on positions <= i only, so the answer at the last position of every length 1..N covers the
    answer at every position of every input; the cases of one length partition its inputs.  The
    positions before the first length's last one are read on the evaluator (`_Run.first_length`)."""
    task: Task = problem.task
    if problem.model.readout.positions == "last":
        answer_cases = getattr(task, "answer_cases", None)
        return case_splits(task) if answer_cases is None else answer_cases()
    return task.last_position_cases()  # type: ignore[attr-defined]


def _batches(cases: Iterator[Case]) -> Iterator[list[Case]]:
    """Consecutive cases of one length, at most BATCH_POSITIONS positions a batch."""
    batch: list[Case] = []
    for case in cases:
        if batch and (case.length != batch[0].length or (len(batch) + 1) * case.length > BATCH_POSITIONS):
            yield batch
            batch = []
        batch.append(case)
    if batch:
        yield batch


class _Run:
    """One run: the model's tables, and the batches of boxes."""

    def __init__(self, problem: Problem, opts: RunOptions, stats: _Stats):
        self.task, self.opts, self.stats = problem.task, opts, stats
        opts.deadline.check()
        # an evaluator of its own: its plans are cached by the id of arrays this run makes (`_lin`)
        query_only = _not_query_only_problem(problem) is None
        self.m = _Model.build(Evaluator(problem.model, problem.arith, tables=False), opts.deadline, query_only)
        self.fx = _intervals(problem.arith)
        self.q = self.m.ev.q
        self.query_only = self.m.second is not None  # two layers, the first read at the last position only
        self.footprint = _Footprint.of(self.q, 0 if self.query_only else -1)
        self.footprint2 = _Footprint.of(self.q) if self.query_only else None
        self.points_per_call = int(min(POINTS_PER_CALL, MEMORY // (2 * (self.footprint2 or self.footprint).row)))
        self.layer = self.q.layers[-1]
        self.window = self.m.window  # two layers: position j's classes read the tokens at j - width .. j
        self.windowed = self.window is not None and self.window.width > 0
        self.track = problem.arith.overflow == "error"
        self._leaf_ev: Optional[Evaluator] = None
        self._rows: dict[int, tuple] = {}  # per linear map: its non-zero rows
        self._own: dict[int, np.ndarray] = {}  # per FFN: the columns it computes from themselves (`_own_columns`)
        self._query_logits: dict[int, dict[bytes, tuple]] = {}  # per second-layer head: `_second_logits`
        self._by_domain: dict = {}

    # -- one batch ----------------------------------------------------------------------------
    def decide(self, cases: list[Case]) -> list[tuple[int, Found]]:
        """Failures among the batch's cases, as (case index in the batch, failure): in the first
        failing case, and in at most max_counterexamples cases (`settled` says how far it got)."""
        self.cases, self.found, self.stack, self.current = cases, [], [], None
        L = self.L = cases[0].length
        self.domains: list[np.ndarray] = []
        self._cache: dict = {}
        ids: dict[int, int] = {}
        alive: list = []
        prefixes, prefix_of, queries = [], [], []
        prev: Optional[Sequence] = None
        prev_oid: list = []
        for case in cases:
            prefix = getattr(case.domains, "prefix", None)  # a shared prefix (`Domains`) is one object
            if prefix is None:
                prefix = case.domains[:-1]
            if prefix is not prev:
                oid = list(map(id, prefix))  # the positions' array objects: a case's positions share a few
                if prev is None or not _same_domains(prefix, prev, oid, prev_oid):
                    for o in set(oid) - ids.keys():  # each new object once: its code
                        d = prefix[oid.index(o)]
                        if len(d) == 1:
                            ids[o] = -1 - int(d[0])
                        else:
                            ids[o] = len(self.domains)
                            self.domains.append(np.asarray(d, dtype=np.int64))
                        alive.append(d)  # alive for the batch, so that its id stays its own
                    prefixes.append(np.fromiter(map(ids.__getitem__, oid), np.int64, L - 1))
                prev, prev_oid = prefix, oid
            prefix_of.append(len(prefixes) - 1)
            queries.append(np.asarray(case.domains[-1], dtype=np.int64))  # the query position: one token a box
        self.prefixes = np.stack(prefixes)
        self.lens = np.array([len(d) for d in self.domains] + [1], dtype=np.int64)  # [-1]: a single token
        self.filtered = np.array([c.valid is not None for c in cases])
        self.answer_pos = self.answer_table = None
        if all(c.answer_at is not None for c in cases):
            self.answer_pos = np.array([c.answer_at[0] for c in cases], dtype=np.int64)
            self.answer_table = np.stack([c.answer_at[1] for c in cases])
        counts = np.array([len(q) for q in queries])
        case_of = np.repeat(np.arange(len(cases)), counts)
        prefix = np.array(prefix_of, dtype=np.int64)[case_of]
        dom = np.concatenate([self.prefixes[prefix], -1 - np.concatenate(queries)[:, None]], axis=1)
        branch = int(self.lens.max())
        if self.footprint2 is None:
            self.per_box = self.footprint.box(L, max(self._widest_classes(self.m.heads)), branch)
        else:  # no children from the parent's sums; the second layer once per code of the query's columns
            self.per_box = self.footprint.box(L, *self._widest_classes(self.m.heads), 0) + 8.0 * L * branch \
                + QUERY_POINTS * self.footprint2.box(L, *self._widest_classes(self.m.second or [], "2"), 0)
        self.per_input = self.footprint.input(L)
        stack = self.stack
        first = _Boxes(dom, case_of, np.zeros(len(case_of), dtype=np.int64), prefix)
        split = self.window is not None or self.query_only  # the query's window, the answer's position
        stack.append(self._open(self._fix_query_window(first) if split else first))
        found = self.found
        want = self.opts.max_counterexamples
        while stack:  # depth first: the children of a round before the rest of its boxes
            self.opts.deadline.check()
            top = stack[-1]
            held = sum(o.nbytes for o in stack)
            n = min(top.fitting(MEMORY - held), ROUND_BOXES)
            if n < 1 and top.fitting(MEMORY) >= 1:
                # the open boxes are index rows a round does not touch: one box that fits MEMORY by itself is
                # decided beside them (the run then holds more than MEMORY, by what the open boxes hold)
                n = 1
                self.stats.beyond_memory += 1
            if n < 1:
                raise TooLarge(f"the bounds engine needs about {fmt_bytes(np.diff(top.cum, prepend=0.0)[top.at])} "
                               f"for one box of length {L} (estimated from the sizes; the open boxes hold "
                               f"{fmt_bytes(held)}), more than the {fmt_bytes(MEMORY)} it works within")
            self.current = boxes = top.take(n)
            if top.at == len(top.boxes):
                stack.pop()
            kids = self._round(boxes, found)
            self.stats.largest_round = max(self.stats.largest_round, len(boxes))
            if len(found) >= want:  # a case at or after the want-th failing one need not be decided further
                last = sorted(c for c, _ in found)[want - 1]
                kept = (o.keep(np.flatnonzero(o.boxes.case[o.at:] < last)) for o in stack)
                stack[:] = [o for o in kept if len(o.boxes)]
                kids = kids.take(np.flatnonzero(kids.case < last))
            if len(kids):
                stack.append(self._open(kids))
            self.current = None
        return found

    def first_length(self) -> list[Found]:
        """A readout at every position: the failures among the inputs of the first length, evaluated
        at every position.  The last-position cases read the last position of every length >= 1;
        this reads the positions before (the start token's, the same in every input of a causal
        model whose first position holds one token)."""
        case = next(iter(case_splits(self.task)))
        grid = product_rows(case.domains)
        found: list = []
        self._evaluate(grid, np.zeros(len(grid), dtype=np.int64), found, must_fail=False)
        return [f for _, f in found]

    def settled(self) -> int:
        """How many of the batch's leading cases are decided: those before its first open box and
        its first failure."""
        first = [len(self.cases)] + [c for c, _ in self.found]
        first += [int(o.boxes.case[o.at:].min()) for o in self.stack if o.at < len(o.boxes)]
        if self.current is not None and len(self.current):
            first.append(int(self.current.case.min()))
        return min(first)

    def _open(self, boxes: _Boxes) -> _Open:
        """Boxes to decide, with the bytes a round takes for each: a box of few inputs is replaced by
        its inputs (`_round`)."""
        sizes = self._sizes(boxes)
        leaf = (sizes <= LEAF_INPUTS) & ((sizes > 1) | (self.answer_pos is None))
        # a box's size overflows float64 at N = 1024 (2^1024 inputs): only a leaf's is multiplied
        return _Open(boxes, np.cumsum(np.where(leaf, np.where(leaf, sizes, 0) * self.per_input, self.per_box)))

    def _widest_classes(self, heads: list[_Head], tag: str = "") -> tuple[int, int]:
        """The most key classes, and value classes, the tokens of one of the batch's domains fall into
        at a position."""
        if self.windowed:
            assert self.window is not None
            widest = int(min(max(h.k.classes for h in heads), self.lens.max() ** (self.window.width + 1)))
            return widest, widest
        return tuple(max([1] + [self._domain_classes(getattr(h, kv), d, (kv + tag, hi)).shape[1]
                                for hi, h in enumerate(heads) for d in self.domains]) for kv in ("k", "v"))

    def _round(self, boxes: _Boxes, found: list) -> _Boxes:
        """Decide or split every box; the boxes left for the next round."""
        self.stats.boxes += len(boxes)
        self.stats.max_depth = max(self.stats.max_depth, int(boxes.depth.max(initial=0)))
        sizes = self._sizes(boxes)
        # small boxes: with the answer known on single inputs, their inputs are bounded exactly
        # (the bounds of one input are its values); otherwise they go to the evaluator
        leaf = (sizes <= LEAF_INPUTS) & ((sizes > 1) | (self.answer_pos is None))
        if leaf.any():
            small = boxes.take(np.flatnonzero(leaf))
            boxes = boxes.take(np.flatnonzero(~leaf))
            members, case_of = self._members(small)
            self.stats.leaves += len(small)
            self.stats.leaf_inputs += len(members)
            if self.answer_pos is None:
                self._evaluate(members, case_of, found, must_fail=False)
            else:
                depth = np.repeat(small.depth + 1, sizes[leaf].astype(np.int64))
                if self.filtered.any():  # a member that is not an input (of a filtered case) needs no bound
                    keep = self.task.evaluate(members)[1]
                    members, case_of, depth = members[keep], case_of[keep], depth[keep]
                boxes = _Boxes.concat(boxes, _Boxes(-1 - members, case_of, depth, np.full(len(case_of), -1)))
            if not len(boxes):
                return boxes
        att = self._attention(boxes)
        lo, hi, ovf = self._head_outputs([h.raw for h in att.heads])
        status = self._judge(boxes, lo, hi, att.ovf | ovf, self._truth(boxes), found)
        single = np.flatnonzero((status == 0) & (boxes.dom < 0).all(axis=1))
        if len(single):  # one input the bounds leave open (a possible saturation): the evaluator decides
            self._evaluate(-1 - boxes.dom[single], boxes.case[single], found, must_fail=False)
            status[single] = -1
        open_ = np.flatnonzero(status == 0)
        if len(open_) < len(boxes):
            boxes, att = boxes.take(open_), att.take(open_)
        if not len(boxes):
            return boxes
        kids, parents = self._split(boxes, att, self._branch_position(boxes, att), found)
        return _Boxes.concat(self._probes(boxes.take(np.unique(parents)), found), kids)

    # -- domains and classes ------------------------------------------------------------------
    def _groups(self, boxes: _Boxes) -> list[tuple[np.ndarray, int]]:
        """The boxes by shared prefix (rows, prefix row), and those with their own (rows, -1)."""
        if len(boxes) and boxes.prefix[0] >= 0 and (boxes.prefix == boxes.prefix[0]).all():
            return [(np.arange(len(boxes)), int(boxes.prefix[0]))]
        order = np.argsort(boxes.prefix, kind="stable")
        keys, starts = np.unique(boxes.prefix[order], return_index=True)
        return [(rows, int(k)) for k, rows in zip(keys, np.split(order, starts[1:]))]

    def _positions(self, boxes: _Boxes, rows: np.ndarray, p: int) -> np.ndarray:
        """The domain ids of positions 0..L-2 of boxes `rows`: one shared row (1, L-1), or their own."""
        return self.prefixes[p][None, :] if p >= 0 else boxes.dom[rows, :-1]

    def _sizes(self, boxes: _Boxes) -> np.ndarray:
        """Inputs per box (as float: only compared with LEAF_INPUTS)."""
        sizes = np.empty(len(boxes))
        with np.errstate(over="ignore"):
            for rows, p in self._groups(boxes):
                dom = self._positions(boxes, rows, p)
                sizes[rows] = np.prod(self.lens[np.where(dom >= 0, dom, -1)].astype(np.float64), axis=1)
        return sizes

    def _query_code(self, boxes: _Boxes) -> np.ndarray:
        """(B,) the class-table column of the query position: its token, or (two layers) its window's
        code (the positions of the query's window hold one token: `_fix_query_window`)."""
        if self.window is None:
            return -1 - boxes.dom[:, -1]
        return self.window.code(-1 - boxes.dom, self.L - 1)

    def _fix_query_window(self, boxes: _Boxes) -> _Boxes:
        """The boxes split into single tokens on the positions of the query's window, and on the
        answer's position (a box that does not fix the answer is split there anyway: bounding it
        first would only choose that split, and a window's split cannot be taken from its parent)."""
        def at(p: int) -> Callable[[_Boxes], np.ndarray]:
            return lambda b: np.full(len(b), p)
        width = 0 if self.window is None else self.window.width
        steps = [at(p) for p in range(max(0, self.L - 1 - width), self.L - 1)]
        if self.answer_pos is not None:
            steps.append(lambda b: self.answer_pos[b.case])
        for at in steps:
            j = at(boxes)
            rows = np.arange(len(boxes))
            held = boxes.dom[rows, j]
            free = (held >= 0) & (self.lens[np.maximum(held, 0)] > 1)
            if not free.any():
                continue
            parent = np.repeat(rows[free], self.lens[held[free]])
            kids = _children(boxes, parent, j, np.concatenate([self.domains[g] for g in held[free]]))
            kids.depth[:] = 0
            boxes = _Boxes.concat(boxes.take(np.flatnonzero(~free)), kids)
            boxes = boxes.take(np.argsort(boxes.case, kind="stable"))
        return boxes

    def _classes(self, table: ClassTable, dom: np.ndarray, key) -> np.ndarray:
        """(n, L-1, W) class ids of the tokens of positions 0..L-2 for domain rows (n, L-1), padded by
        repetition.  Per domain and position, the distinct classes are found once per batch.  Two
        layers: the classes of the window codes of the product of the window's token sets."""
        L1 = dom.shape[1]
        if key not in self._cache:
            per = [self._domain_classes(table, d, key)[:L1] for d in self.domains]
            W = max([c.shape[1] for c in per] + [1])
            self._cache[key] = np.stack([np.pad(c, ((0, 0), (0, W - c.shape[1])), mode="edge") for c in per]) \
                if per else np.zeros((0, L1, 1), dtype=np.int64)
        stack = self._cache[key]
        W = stack.shape[2]
        single = dom < 0
        out = np.repeat(table.rid[np.arange(L1), np.where(single, -1 - dom, 0)][..., None], W, axis=2)
        if not single.all():
            b, j = np.nonzero(~single)
            out[b, j] = stack[dom[b, j], j]
        return out

    def _slots(self, dom: np.ndarray) -> np.ndarray:
        """Two layers: (n, L-1) the slot of each position of domain rows (n, L-1).  A slot is a
        (position j, window of token sets at j - width .. j); its codes are those of every token
        combination of the window (a superset of the box's windows, exact when they hold single
        tokens).  Slots are found in a dense index, made once per batch; a class table's classes
        are then found once per slot (`_slot_sets`), and bounded once per set, not per position."""
        n, L1 = dom.shape
        assert self.window is not None
        w, V = self.window.width, self.window.V
        base = V + len(self.domains)  # a position's code shifted to 0 .. base - 1: tokens, then domains
        space = base ** (w + 1)
        if "slots" not in self._cache:
            if space * (self.L - 1) > WINDOW_INDEX:
                raise TooLarge(f"{len(self.domains)} token sets make {space:,} windows of {w + 1} positions; the "
                               f"bounds engine indexes at most {WINDOW_INDEX:,} (position, window) pairs")
            # the index; each slot's position and window; each window's codes
            self._cache["slots"] = (np.full((self.L - 1, space), -1, dtype=np.int64), [], [], [])
        index, at, win, codes = self._cache["slots"]
        pad = np.concatenate([np.full((n, w), -1, dtype=np.int64), dom], axis=1) + V  # before 0: token 0
        wkey = sum(pad[:, w - k:w - k + L1] * base ** k for k in range(w + 1))
        j = np.broadcast_to(np.arange(L1), (n, L1))
        slot = index[j, wkey]
        if (slot < 0).any():
            new = np.unique(j[slot < 0] * space + wkey[slot < 0])
            nj, nk = np.divmod(new, space)
            for k in np.unique(nk):
                c = np.zeros(1, dtype=np.int64)  # a position before 0 holds token 0: digit 0
                for i in range(w + 1):
                    g = k // base ** i % base - V
                    toks = self.domains[g] if g >= 0 else np.array([-1 - g])
                    c = (c[:, None] + toks[None, :] * V ** i).reshape(-1)
                js = nj[nk == k]
                index[js, k] = len(at) + np.arange(len(js))
                at.extend(js.tolist())
                win.extend([len(codes)] * len(js))
                codes.append(c)
            slot = index[j, wkey]
        return slot

    def _slot_sets(self, table: ClassTable, key) -> np.ndarray:
        """(slots, W) the distinct classes of each slot's codes in a table, padded by repetition."""
        _, at, win, codes = self._cache["slots"]
        sets = self._cache.get(("sets", key), np.zeros((0, 1), dtype=np.int64))
        if len(sets) < len(at):
            size = np.array([len(c) for c in codes])  # each window's codes, padded by repeating its last
            start = np.cumsum(size) - size  # (the same distinct classes)
            padded = np.concatenate(codes)[start[:, None] + np.minimum(np.arange(size.max()), size[:, None] - 1)]
            new = slice(len(sets), len(at))
            fresh = _distinct_rows(table.rid[np.array(at[new])[:, None], padded[np.array(win[new])]])
            W = max(fresh.shape[1], sets.shape[1])
            pad = lambda r: np.pad(r, ((0, 0), (0, W - r.shape[1])), mode="edge")
            sets = self._cache["sets", key] = np.concatenate([pad(sets), pad(fresh)])
        return sets

    def _domain_classes(self, table: ClassTable, d: np.ndarray, key) -> np.ndarray:
        """(L_max, W) the distinct classes of a domain's tokens at every position, once per run
        (index lookup's symbol domain is one array for all its cases)."""
        hit = self._by_domain.get((key, id(d)))
        if hit is None or hit[0] is not d:
            hit = self._by_domain[key, id(d)] = (d, _distinct_rows(table.rid[:, d]))
        return hit[1]

    def _layer0_ovf(self, boxes: _Boxes, qtok: np.ndarray, slot: Optional[np.ndarray]) -> np.ndarray:
        """(B,) bool: some pair of the box saturates in layer 0 (overflow = error only); two layers:
        some window of the box saturates in the first layer or the last layer's keys or values."""
        ovf = np.zeros(len(boxes), dtype=bool)
        if self.m.pair_ovf is None:
            return ovf
        pair = self.m.pair_ovf[:self.L]
        if slot is not None:  # flags as a class table over window codes
            table = ClassTable(pair.astype(np.int64), np.array([[0], [1]]), np.zeros(2, dtype=bool))
            ovf = (self._slot_sets(table, "ovf") == 1).any(axis=1)[slot].any(axis=1)
            return ovf | pair[-1, qtok] | np.any([q.ovf[q.rid[self.L - 1, qtok]] for q in self._queries()], axis=0)
        for rows, p in self._groups(boxes):
            dom = self._positions(boxes, rows, p)
            per = ("ovf", p)
            if per not in self._cache:
                anyof = np.array([pair[:-1, d].any(axis=1) for d in self.domains]).reshape(len(self.domains),
                                                                                          self.L - 1)
                self._cache[per] = anyof
            single = dom < 0
            flags = np.where(single, pair[np.arange(self.L - 1), np.where(single, -1 - dom, 0)],
                             self._cache[per][np.maximum(dom, 0), np.arange(self.L - 1)] if len(self.domains)
                             else False)
            ovf[rows] = flags.any(axis=1)
        ovf |= pair[-1, qtok]
        for q in self._queries():
            ovf |= q.ovf[q.rid[self.L - 1, qtok]]
        return ovf

    def _queries(self) -> list[ClassTable]:
        """The query tables of the heads bounded over (position, token) (every head but a second
        layer's, whose queries are found per box)."""
        return [cast(ClassTable, h.q) for h in self.m.heads]

    # -- bounds -------------------------------------------------------------------------------
    def _attention(self, boxes: _Boxes, second: Optional[tuple[list[_Head], list[np.ndarray]]] = None) -> _Attention:
        """Per head: logit bounds per position, the weight and term bounds of the positions whose
        weight may be positive, and the bounds of the heads' sums.  `second`: the second layer's
        heads (a non-local first layer), with their logit tables and each box's query row in them."""
        fx, L, B = self.fx, self.L, len(boxes)
        heads_, layer = (self.m.heads, self.q.layers[0 if self.query_only else -1]) if second is None else \
            (second[0], self.layer)
        tag = "" if second is None else "2"
        qtok = self._query_code(boxes)
        groups = self._groups(boxes)
        slot = None
        if self.windowed:  # every box's slots (positions 0..L-2), found once for every table
            slot = np.empty((B, L - 1), dtype=np.int64)
            for rows, p in groups:
                slot[rows] = self._slots(self._positions(boxes, rows, p))
        ovf = self._layer0_ovf(boxes, qtok, slot)
        heads = []
        for hi, h in enumerate(heads_):
            qrow = cast(ClassTable, h.q).rid[L - 1, qtok] if second is None else second[1][hi]
            slo, shi = np.empty((B, L), h.logits.dtype), np.empty((B, L), h.logits.dtype)
            exact = True
            if slot is not None:
                exact = self._window_logits(h, qrow, slot, ("k", hi), slo, shi, ovf)
            for rows, p in groups if slot is None else ():
                kid = self._classes(h.k, self._positions(boxes, rows, p), ("k" + tag, hi))
                n, W = len(rows), kid.shape[2]
                if p >= 0:  # one row of key classes for all: gather whole rows of the logit table
                    s = h.logits[qrow[rows]][:, kid.reshape(-1)].reshape(n, L - 1, W)
                else:
                    s = h.logits[qrow[rows][:, None, None], kid]
                slo[rows, :-1], shi[rows, :-1] = s.min(axis=2), s.max(axis=2)
                exact &= W == 1
                if self.m.pair_ovf is not None:
                    hit = h.logit_ovf[qrow[rows][:, None, None], kid] if p < 0 else \
                        h.logit_ovf[qrow[rows]][:, kid.reshape(-1)]
                    ovf[rows] |= any_per_row(hit)
            slo[:, -1] = shi[:, -1] = h.logits[qrow, h.k.rid[L - 1, qtok]]
            if self.m.pair_ovf is not None:
                ovf |= h.logit_ovf[qrow, h.k.rid[L - 1, qtok]]
            if exact:
                shi = slo
            if layer.attention == "softmax":
                b, j, alo, ahi = fx.softmax_bounds(slo, shi, ovf)
            else:
                b, j, alo, ahi = fx.relu_weight_bounds(slo, shi, ovf)
            if slot is None:
                vlo, vhi = self._value_bounds(h, boxes, b, j, ("v" + tag, hi))
            else:
                vlo, vhi = self._window_values(h, boxes, b, j, slot, ("v", hi))
            term_ovf = np.zeros(len(b), dtype=bool)
            tlo, thi = fx.term_bounds(alo[:, None], ahi[:, None], vlo, vhi, term_ovf)
            ovf[b[term_ovf]] = True
            heads.append(_HeadBounds(slo, shi, b, j, alo, ahi, tlo, thi, fx.sum_terms(b, tlo, thi, B)))
        return _Attention(heads, ovf)

    def _window_logits(self, h: _Head, qrow: np.ndarray, slot: np.ndarray, key, slo: np.ndarray, shi: np.ndarray,
                       ovf: np.ndarray) -> bool:
        """Two layers: the logit bounds of positions 0..L-2 into slo, shi (and their possible
        saturation into ovf), each (query class, class set) bounded once.  Exact: every set is one
        class."""
        sets = self._slot_sets(h.k, key)
        uq, qi = np.unique(qrow, return_inverse=True)
        qi = qi.reshape(-1, 1)
        s = h.logits[uq[:, None, None], sets[None, :, :]]  # (query classes, sets, W)
        slo[:, :-1] = s.min(axis=2)[qi, slot]
        shi[:, :-1] = s.max(axis=2)[qi, slot]
        if self.m.pair_ovf is not None:
            ovf |= h.logit_ovf[uq[:, None, None], sets[None, :, :]].any(axis=2)[qi, slot].any(axis=1)
        return sets.shape[1] == 1

    def _window_values(self, h: _Head, boxes: _Boxes, b: np.ndarray, j: np.ndarray, slot: np.ndarray,
                       key) -> tuple[np.ndarray, np.ndarray]:
        """Two layers: `_value_bounds` from the slots, each class set bounded once."""
        vals = h.v.values[self._slot_sets(h.v, key)]  # (sets, W, mv)
        vmin, vmax = vals.min(axis=1), vals.max(axis=1)
        query = j == self.L - 1
        at = slot[b, np.minimum(j, self.L - 2)]
        vlo, vhi = vmin[at], vmax[at]
        qv = h.v.values[h.v.rid[self.L - 1, self._query_code(boxes)[b[query]]]]
        vlo[query], vhi[query] = qv, qv
        return vlo, vhi

    def _value_bounds(self, h: _Head, boxes: _Boxes, b: np.ndarray, j: np.ndarray,
                      key) -> tuple[np.ndarray, np.ndarray]:
        """(K, mv) bounds of the value vectors at the entries (box b, position j)."""
        mv, dtype = h.v.values.shape[1], h.v.values.dtype
        vlo, vhi = np.empty((len(b), mv), dtype), np.empty((len(b), mv), dtype)
        query = j == self.L - 1
        qv = h.v.values[h.v.rid[self.L - 1, self._query_code(boxes)[b[query]]]]
        vlo[query], vhi[query] = qv, qv
        rest = np.flatnonzero(~query)
        for rows, p in self._groups(boxes):
            mine = rest[np.isin(b[rest], rows)] if len(rows) < len(boxes) else rest
            if not len(mine):
                continue
            if p >= 0:
                vid = self._classes(h.v, self._positions(boxes, rows, p), key)[0][j[mine]]
            else:
                vid = self._classes(h.v, boxes.dom[b[mine]][:, :-1], key)[np.arange(len(mine)), j[mine]]
            vals = h.v.values[vid]  # (k, W, mv)
            vlo[mine], vhi[mine] = vals.min(axis=1), vals.max(axis=1)
        return vlo, vhi

    def _head_outputs(self, raws: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, H, mv) bounds of the heads' outputs from their raw sums, and possible saturation."""
        return self.fx.head_output_bounds(raws, self.L)

    def _judge(self, boxes: _Boxes, hlo: np.ndarray, hhi: np.ndarray, ovf: np.ndarray, truth: np.ndarray,
               found: list) -> np.ndarray:
        """Per box: 1 correct on all of it, -1 (a failure found) or 0 (open)."""
        if self.query_only:
            status, margin = self._second_layer(boxes, hlo, hhi, ovf, truth)
        else:
            status, margin = self._readout(hlo, hhi, self._query_code(boxes), ovf, truth)
        self.stats.margin(margin[status == 1])
        bad = np.flatnonzero(status == -1)
        if len(bad):
            status[bad] = self._failing(boxes.take(bad), found)
        return status

    def _second_layer(self, boxes: _Boxes, hlo: np.ndarray, hhi: np.ndarray, ovf: np.ndarray,
                      truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Status and margin bound per box of a two-layer model whose first layer is read at the last
        position only (`_not_query_only`), from the first layer's head-output bounds there.

        The first layer's output at the query is bounded like a one-layer readout's input (its FFN
        column by column where it can: `_ffn`); where the columns the second layer's query reads
        hold at most QUERY_POINTS codes over the box, each code is one exact query, and the second
        layer is bounded for it like layer 0, its keys and values being tables over (position,
        token).  The box is correct when it is for every code, fails when it does for every code;
        a box with more codes stays open (and branches)."""
        fx, n = self.fx, len(boxes)
        qtok = self._query_code(boxes)
        x0 = self._query_embedding()[qtok]
        lo, hi = self._layer_out(self.q.layers[0], hlo, hhi, x0, x0, fx.context((n,)), by_column=True)
        cols = self.m.query_cols
        olo = fx.ordinal(lo[:, cols])
        width = (fx.ordinal(hi[:, cols]) - olo + 1).astype(np.float64)
        with np.errstate(over="ignore"):  # a product beyond float64 is inf: more than QUERY_POINTS all the same
            points = np.prod(width, axis=1)
        status, margin = np.zeros(n, dtype=np.int64), np.full(n, -np.inf)
        rows = np.flatnonzero(points <= QUERY_POINTS)
        if not len(rows):
            return status, margin
        point_of, codes, starts = _code_points(fx, olo[rows], width[rows])
        row_of = rows[point_of]
        xlo, xhi = lo[row_of], hi[row_of]
        xlo[:, cols] = xhi[:, cols] = codes
        heads, qrows = [], []
        for at, (h, head) in enumerate(zip(self.m.second or [], self.layer.heads)):
            # exact: the columns it reads are codes
            q, _ = self._lin(head.W_Q, head.b_Q, xlo, xhi, fx.context((len(row_of),)))
            _, first, inv = np.unique(q, axis=0, return_index=True, return_inverse=True)
            logits, logit_ovf = self._second_logits(at, h, q[first])
            heads.append(replace(h, logits=logits, logit_ovf=logit_ovf))
            qrows.append(inv.reshape(-1))
        att = self._attention(boxes.take(row_of), (heads, qrows))
        lo2, hi2, ovf2 = self._head_outputs([h.raw for h in att.heads])
        pstatus, pmargin = self._readout(lo2, hi2, qtok[row_of], ovf[row_of] | att.ovf | ovf2, truth[row_of],
                                         (xlo, xhi))
        every = lambda ok: np.logical_and.reduceat(ok, starts)
        status[rows] = np.where(every(pstatus == 1), 1, np.where(every(pstatus == -1), -1, 0))
        margin[rows] = np.minimum.reduceat(pmargin, starts)
        return status, margin

    def _second_logits(self, at: int, h: _Head, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`score_table`'s rows for the query codes Q (n, m) of second-layer head `at`, each distinct
        query computed once a run (the boxes of G.2's constructions have a few dozen queries between
        them): the head's logits and logit_ovf."""
        cache = self._query_logits.setdefault(at, {})
        if len(cache) > SECOND_QUERIES:
            cache.clear()
        keys = [r.tobytes() for r in Q]
        new = [i for i, k in enumerate(keys) if k not in cache]
        if new:
            for i, s, f in zip(new, *score_table(self.fx, Q[new], h.k.values)):
                cache[keys[i]] = (s, f)
        return np.stack([cache[k][0] for k in keys]), np.stack([cache[k][1] for k in keys])

    def _readout(self, hlo: np.ndarray, hhi: np.ndarray, qtok: np.ndarray, ovf: np.ndarray,
                 truth: np.ndarray, resid: Optional[tuple[np.ndarray, np.ndarray]] = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Status and margin bound per row from its head-output bounds (rows, H, mv).

        Interval bounds through the FFN lose the correlation of its units (each ReLU sees the
        same head output); a row left open whose head-output box holds few codes is therefore
        decided again at every code point of that box, exactly: the points hold every output the
        heads can give, so the row is correct when every point is, and fails when every point does."""
        ovf = ovf & self.track  # a saturation fails an input only under overflow = error
        ylo, yhi, post_ovf = self._post(hlo, hhi, qtok, resid)
        status, margin = self._verdict(ylo, yhi, ovf | post_ovf, truth)
        fx = self.fx
        olo = fx.ordinal(hlo)  # a value's rank: the points between two bounds are consecutive ranks
        width = _rows(fx.ordinal(hhi) - olo + 1).astype(np.float64)
        points = np.prod(width, axis=1)
        rows = np.flatnonzero((status == 0) & (truth >= 0) & (points <= POINTS_PER_ROW))
        rows = rows[np.cumsum(points[rows]) <= self.points_per_call]
        if not len(rows):
            return status, margin
        row_of, code, starts = _code_points(fx, _rows(olo[rows]), width[rows])
        code = code.reshape((len(code),) + hlo.shape[1:])
        plo, phi, povf = self._post(code, code, qtok[rows][row_of],
                                    None if resid is None else (resid[0][rows][row_of], resid[1][rows][row_of]))
        pstatus, pmargin = self._verdict(plo, phi, povf, truth[rows][row_of])
        every = lambda ok: np.logical_and.reduceat(ok, starts)
        status[rows] = np.where(every(pstatus == 1) & ~ovf[rows], 1, np.where(every(pstatus == -1), -1, 0))
        margin[rows] = np.minimum.reduceat(pmargin, starts)
        return status, margin

    def _post(self, hlo: np.ndarray, hhi: np.ndarray, qtok: np.ndarray,
              resid: Optional[tuple[np.ndarray, np.ndarray]] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Readout bounds from head-output bounds (rows, H, mv), computed once per distinct row.  The
        residual is the query's embedding, or the bounds `resid` (rows, d) of a first layer's output."""
        fx, layer, ro = self.fx, self.layer, self.q.readout
        rows = len(hlo)
        if resid is None:  # rows repeat (a head-output box, a query token): each distinct one once
            first, inv = _unique_rows(np.concatenate([hlo.reshape(rows, -1), hhi.reshape(rows, -1)]
                                                     + ([qtok[:, None]] if layer.residual else []), axis=1))
        else:  # rows of (box, query code), with their first layer's output: few repeat
            first = inv = np.arange(rows)
        ctx = fx.context((len(first),))
        if resid is None:
            x0lo = x0hi = self._query_embedding()[qtok[first]]
        else:
            x0lo, x0hi = resid[0][first], resid[1][first]
        lo, hi = self._layer_out(layer, hlo[first], hhi[first], x0lo, x0hi, ctx)
        ylo, yhi = self._lin(ro.W_U, ro.b_U, lo, hi, ctx)
        return ylo[inv], yhi[inv], ctx.ovf[inv]

    def _layer_out(self, layer, hlo: np.ndarray, hhi: np.ndarray, x0lo: np.ndarray, x0hi: np.ndarray, ctx,
                   by_column: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of a layer's output (rows, d) from its head-output bounds (rows, H, mv) and its
        residual input's bounds (x0lo, x0hi)."""
        fx = self.fx
        if layer.attention == "softmax":
            lo, hi = _rows(hlo), _rows(hhi)
        else:
            lo, hi = fx.mean_heads(hlo, ctx, "heads"), fx.mean_heads(hhi, ctx, "heads")
        lo, hi = self._lin(layer.W_O, layer.b_O, lo, hi, ctx)
        if layer.residual:
            lo, hi = fx.add(x0lo, lo, ctx, "resid"), fx.add(x0hi, hi, ctx, "resid")
        if layer.has_ffn:
            lo, hi = self._ffn(layer, lo, hi, ctx, by_column)
        return lo, hi

    def _ffn(self, layer, lo: np.ndarray, hi: np.ndarray, ctx, by_column: bool) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of the FFN's output (residual included) for x in [lo, hi].  Interval bounds lose the
        correlation of the units that read one column (G.2's sigma: ReLU(h + 1) - ReLU(h - 1) - ReLU(h)
        + ReLU(-h), four units, quadruples the width).  `by_column`: a column c whose writers read c
        only has an output that is a function of x_c alone; it is computed at every code of x_c's
        bounds (up to COLUMN_POINTS of them, all the columns at once: the t-th code of each) and its
        bounds are the least and greatest."""
        fx = self.fx

        def out(a: np.ndarray, b: np.ndarray, c) -> tuple[np.ndarray, np.ndarray]:
            flo, fhi = self._lin(layer.W1, layer.b1, a, b, c)
            rlo = fx.relu(flo)
            flo, fhi = self._lin(layer.W2, layer.b2, rlo, rlo if fhi is flo else fx.relu(fhi), c)
            if not layer.residual:
                return flo, fhi
            ylo = fx.add(a, flo, c, "out")
            return ylo, (ylo if a is b and fhi is flo else fx.add(b, fhi, c, "out"))

        ylo, yhi = out(lo, hi, ctx)
        if not by_column:
            return ylo, yhi
        olo, ohi = fx.ordinal(lo), fx.ordinal(hi)
        if id(layer) not in self._own:
            self._own[id(layer)] = _own_columns(layer)
        use = self._own[id(layer)][None, :] & (ohi - olo < COLUMN_POINTS)
        if not use.any():
            return ylo, yhi
        clo = out(lo, lo, ctx)[0]
        chi = clo.copy()
        span = np.where(use, ohi - olo, 0).max(axis=1)
        for t in range(1, int(span.max()) + 1):
            r = np.flatnonzero(span >= t)  # only the rows with a column this wide: most boxes have narrow ones
            sub = fx.context((len(r),))
            x = fx.from_ordinal(np.minimum(olo[r] + t, ohi[r]))
            y = out(x, x, sub)[0]
            ctx.ovf[r] |= sub.ovf
            clo[r], chi[r] = np.minimum(clo[r], y), np.maximum(chi[r], y)
        return np.where(use, clo, ylo), np.where(use, chi, yhi)

    def _query_embedding(self) -> np.ndarray:
        """(V, d) the embedding of every token at the query position L-1 (its saturation is in pair_ovf);
        two layers: the first layer's output for every window code there."""
        if self.m.states is not None:
            return self.m.states[self.L - 1]
        if "x0" not in self._cache:
            q, fx = self.q, self.fx
            add = np.where(q.P_mask[:, None], q.P[self.L - 1][None, :], 0)
            self._cache["x0"] = fx.add(q.E, add, fx.context((len(q.E),)), "embed")
        return self._cache["x0"]

    def _lin(self, W: np.ndarray, b, lo: np.ndarray, hi: np.ndarray, ctx) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of the linear rule W x + b for x in [lo, hi]: each product R(w x) is monotone in x,
        rising for w > 0 and falling for w < 0, so the bounds take x at the matching end.  A point
        (lo is hi) is computed once, and its bounds are one array."""
        if id(W) not in self._rows:  # a row of zeros gives its bias exactly: only the others are computed
            live = np.flatnonzero(np.any(W != 0, axis=1))
            self._rows[id(W)] = (live, W[live], None if b is None else b[live])
        live, Wl, bl = self._rows[id(W)]
        Wc, cols, gathered = self.m.ev._plan(Wl)
        xl, xh = lo[..., cols], hi[..., cols]
        if not gathered:
            xl, xh = xl[..., None, :], xh[..., None, :]
        up = Wc > 0
        ylo = np.zeros(lo.shape[:-1] + (W.shape[0],), dtype=lo.dtype) if b is None else \
            np.broadcast_to(b, lo.shape[:-1] + (W.shape[0],)).copy()
        if lo is hi:
            ylo[..., live] = self.fx.lin_gathered(Wc, xl, bl, ctx, "lin")  # the products broadcast
            return ylo, ylo
        yhi = ylo.copy()
        ylo[..., live] = self.fx.lin_gathered(Wc, np.where(up, xl, xh), bl, ctx, "lin")
        yhi[..., live] = self.fx.lin_gathered(Wc, np.where(up, xh, xl), bl, ctx, "lin")
        return ylo, yhi

    def _truth(self, boxes: _Boxes) -> np.ndarray:
        """(B,) the answer on every input of the box, or -1 when the box does not fix it."""
        truth = np.full(len(boxes), -1, dtype=np.int64)
        if self.answer_pos is None:
            return truth
        held = boxes.dom[np.arange(len(boxes)), self.answer_pos[boxes.case]]
        fixed = np.flatnonzero(held < 0)
        truth[fixed] = self.answer_table[boxes.case[fixed], -1 - held[fixed]]
        return truth

    def _verdict(self, ylo: np.ndarray, yhi: np.ndarray, ovf: np.ndarray,
                 truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per box: 1 (correct on all of it), -1 (fails on all of it) or 0; and the margin's lower
        bound in real units (as `Evaluator.margins` measures margins)."""
        ro, fx = self.q.readout, self.fx
        rows = np.arange(len(truth))
        known = truth >= 0
        t = np.where(known, truth, 0)
        if ro.kind == "argmax":
            if ylo.shape[1] == 1:  # one class: always the answer
                low = high = np.ones(len(t), dtype=np.int64)
                margin = np.full(len(t), np.inf)
            else:
                low = ylo[rows, t] - _max_others(yhi, t)
                high = yhi[rows, t] - _max_others(ylo, t)
                margin = fx.to_real(low)
        else:
            # bit i is 1 iff y_i > c (codes): a wanted 1 holds on the box when ylo > c and fails
            # on all of it when yhi <= c; a wanted 0 holds when yhi <= c and fails when ylo > c
            c = fx.threshold_code(ro.theta)
            want = ((t[:, None] >> np.arange(ylo.shape[1])) & 1) == 1
            low = np.where(want, ylo > c, yhi <= c).all(axis=1).astype(np.int64)  # 1: every bit holds
            high = 1 - np.where(want, yhi <= c, ylo > c).any(axis=1)  # 0: some bit fails
            margin = np.where(want, fx.to_real(ylo) - float(ro.theta), float(ro.theta) - fx.to_real(yhi)).min(axis=1)
        status = np.zeros(len(t), dtype=np.int64)
        status[known & (low > 0) & ~ovf] = 1
        status[known & (high <= 0)] = -1
        if self.m.always:  # a saturated parameter that every input uses: every input fails
            status[:] = -1
        return status, margin

    def _failing(self, boxes: _Boxes, found: list) -> np.ndarray:
        """Boxes on which every input fails: the first member of the first in each case is a
        failure (evaluated on the evaluator).  A filtered case's first member may not be an input:
        the first of its boxes' probes (`_probe_members`) that is one is evaluated instead, and must
        fail; the boxes of a case with no such probe stay open.  Their new status (-1, or 0)."""
        filtered = self.filtered[boxes.case]
        single = (boxes.dom < 0).all(axis=1)
        bad = np.flatnonzero(~filtered)
        ci = boxes.case[bad]
        first = bad[np.concatenate([[True], ci[1:] != ci[:-1]])] if len(bad) else bad
        self._evaluate(self._first_members(boxes.take(first)), boxes.case[first], found, must_fail=True)
        alone = np.flatnonzero(filtered & single)  # one input of a filtered case: is it one, and does it fail?
        self._evaluate(-1 - boxes.dom[alone], boxes.case[alone], found, must_fail=False)
        status = np.where(filtered & ~single, 0, -1)
        wide = np.flatnonzero(filtered & ~single)
        if len(wide):
            members, case_of = self._probe_members(boxes.take(wide))
            valid = np.flatnonzero(self.task.evaluate(members)[1])
            cases, first = np.unique(case_of[valid], return_index=True)  # one failure a case will do
            self._evaluate(members[valid[first]], cases, found, must_fail=True)
            status[wide[np.isin(boxes.case[wide], cases)]] = -1
        return status

    def _probes(self, boxes: _Boxes, found: list) -> _Boxes:
        """Boxes of one input each, decided in the next round before the children: a member of each
        box that has children bounded anew (the children decided from their parent's sums need no
        probe), its first if that is an input, else its spread one (`_probe_members`).  A failing
        input inside a box whose bounds straddle 0 is so found at once rather than after the descent
        to its leaf (nearest neighbour at N = 32, p = 10: the first member of the first box fails).
        One input's bounds are exact, so a probe costs a child's bounding, not an evaluation (the
        evaluator's generic path takes 25 ms an input at N = 64); a failing one is evaluated
        (`_failing`).  Only the cases before the first failing one are probed: a later case's
        failure would not be reported."""
        if found:
            boxes = boxes.take(np.flatnonzero(boxes.case < min(c for c, _ in found)))
        if not len(boxes):
            return boxes
        members, case_of = self._probe_members(boxes)
        B = len(boxes)
        valid = self.task.evaluate(members)[1] if len(members) else np.zeros(0, dtype=bool)
        pick = np.where(valid[:B], np.arange(B), B + np.arange(B))[np.flatnonzero(valid[:B] | valid[B:])]
        pick = pick[np.sort(np.unique(members[pick], axis=0, return_index=True)[1])] if len(pick) else pick
        return _Boxes(-1 - members[pick], case_of[pick], boxes.depth[pick % B],  # no branching: its depth
                      np.full(len(pick), -1, dtype=np.int64))

    def _first_members(self, boxes: _Boxes) -> np.ndarray:
        """(B, L) each box's first member: every position's first token."""
        firsts = np.array([d[0] for d in self.domains] + [0], dtype=np.int64)
        return np.where(boxes.dom < 0, -1 - boxes.dom, firsts[np.maximum(boxes.dom, 0)])

    def _probe_members(self, boxes: _Boxes) -> tuple[np.ndarray, np.ndarray]:
        """(2B, L) two members of each box, and the case of each: its first member, and a spread
        one, in which each position holds the token of its domain used least at the positions
        before it (the first on ties): its tokens are distinct where the domains allow, so it is
        an input of a task that wants distinct tokens (MQAR's keys) where the first member is not."""
        B = len(boxes)
        spread = np.empty_like(boxes.dom)
        uses = np.zeros((B, int(max([d.max() for d in self.domains] + [(-1 - boxes.dom).max()])) + 1), dtype=np.int64)
        rows = np.arange(B)
        for j in range(self.L):
            col = boxes.dom[:, j]
            spread[:, j] = np.where(col < 0, -1 - col, 0)
            for g in np.unique(col[col >= 0]):
                r = np.flatnonzero(col == g)
                tokens = self.domains[g]
                spread[r, j] = tokens[np.argmin(uses[r][:, tokens], axis=1)]
            uses[rows, spread[:, j]] += 1
        return np.concatenate([self._first_members(boxes), spread]), np.concatenate([boxes.case, boxes.case])

    # -- branching ----------------------------------------------------------------------------
    def _branch_position(self, boxes: _Boxes, att: _Attention) -> np.ndarray:
        """(B,) the position to split: the answer's while the box does not fix it; else the one with
        the widest logit bounds (they widen every weight), then the one with the widest term."""
        B, L = len(boxes), self.L
        rows = np.arange(B)
        j = np.full(B, -1, dtype=np.int64)
        if self.answer_pos is not None:
            ja = self.answer_pos[boxes.case]
            unknown = (boxes.dom[rows, ja] >= 0) & (self.lens[np.maximum(boxes.dom[rows, ja], 0)] > 1)
            j[unknown] = ja[unknown]
        todo = np.flatnonzero(j < 0)
        if not len(todo):
            return j
        sub = att.take(todo) if len(todo) < B else att
        free = self.lens[np.where(boxes.dom[todo] >= 0, boxes.dom[todo], -1)] > 1
        score = np.zeros((len(todo), L))
        for h in sub.heads:
            if not h.exact:
                score += (h.shi - h.slo) * float(1 << 40)  # a logit interval widens every weight
            np.add.at(score, (h.b, h.j), (h.thi - h.tlo).sum(axis=1) + 1.0)
        j[todo] = np.where(free, score, -1.0).argmax(axis=1)
        return j

    def _split(self, boxes: _Boxes, att: _Attention, j: np.ndarray, found: list) -> tuple[_Boxes, np.ndarray]:
        """The children of every box at its position j, one per token, that stay open, and the row of
        each one's parent.

        Where position j's logit bounds are one value in every head, splitting j changes no weight
        bound: a child is its parent's sums with position j's term replaced by its token's, so the
        children are decided here, from the parents (`_children_by_table`), and only the open
        ones go on to be bounded anew."""
        rows = np.arange(len(boxes))
        doms = boxes.dom[rows, j]
        parent = np.repeat(rows, self.lens[doms])
        tokens = np.concatenate([self.domains[g] for g in doms])
        # a token at j changes the classes of j .. j + width: only a one-position window keeps the others
        same = np.full(len(boxes), not (self.windowed or self.query_only))
        for h in att.heads:
            if not h.exact:
                same &= h.slo[rows, j] == h.shi[rows, j]
        by_table = np.flatnonzero(same[parent])
        open_ = np.flatnonzero(~same[parent])
        if len(by_table):
            status = self._children_by_table(boxes, att, j, parent[by_table], tokens[by_table], found)
            open_ = np.sort(np.concatenate([open_, by_table[status == 0]]))
        return _children(boxes, parent[open_], j, tokens[open_]), parent[open_]

    def _children_by_table(self, boxes: _Boxes, att: _Attention, j: np.ndarray, parent: np.ndarray,
                           tokens: np.ndarray, found: list) -> np.ndarray:
        """Decide children (parent box, token at the parent's position j) from the parents' sums;
        each distinct (parent sums, token, answer) is computed once.  Their status (1, -1, 0)."""
        fx = self.fx
        self.stats.boxes += len(parent)
        self.stats.max_depth = max(self.stats.max_depth, int(boxes.depth.max(initial=0)) + 1)
        at = [h.at(j) for h in att.heads]  # per head: the parents' weight and term bounds at j
        key = np.concatenate([np.stack([alo, ahi], axis=1) for alo, ahi, _, _ in at]
                             + [_rows(r) for h in att.heads for r in h.raw]
                             + [t for _, _, tlo, thi in at for t in (tlo, thi)]
                             + [att.ovf[:, None]] + ([-1 - boxes.dom[:, -1:]] if self.layer.residual else []), axis=1)
        _, uid = _unique_rows(key)
        truth = self._truth(boxes)[parent]
        if self.answer_pos is not None:
            case = boxes.case[parent]
            hit = j[parent] == self.answer_pos[case]
            truth[hit] = self.answer_table[case[hit], tokens[hit]]
        vclass = [head.v.rid[j[parent], tokens] for head in self.m.heads]  # what the child's term reads
        pick, inv = _unique_rows(np.stack([uid[parent], truth] + vclass, axis=1))
        par = parent[pick]
        ovf = att.ovf[par].copy()
        raws = []
        for h, head, vc, (alo, ahi, old_lo, old_hi) in zip(att.heads, self.m.heads, vclass, at):
            v = head.v.values[vc[pick]]
            new = fx.term_bounds(alo[par][:, None], ahi[par][:, None], v, v, ovf)
            raws.append(fx.replace_term(tuple(r[par] for r in h.raw), (old_lo[par], old_hi[par]), new))
        lo, hi, head_ovf = self._head_outputs(raws)
        status, margin = self._readout(lo, hi, self._query_code(boxes)[par], ovf | head_ovf, truth[pick])
        self.stats.margin(margin[status == 1])
        status = status[inv]
        bad = np.flatnonzero(status == -1)
        if len(bad):
            status[bad] = self._failing(_children(boxes, parent[bad], j, tokens[bad]), found)
        return status

    def open_boxes(self, most: int) -> list[list[np.ndarray]]:
        """The first `most` boxes left undecided when the run stopped (the round under way, then
        the open boxes depth first), each as its positions' tokens."""
        rows = [self.current] if self.current is not None else []
        rows += [o.boxes.take(np.arange(o.at, len(o.boxes))) for o in reversed(self.stack)]
        out: list[list[np.ndarray]] = []
        for boxes in rows:
            out += [self._tokens(dom) for dom in boxes.dom[:most - len(out)]]
        return out

    def _tokens(self, dom: np.ndarray) -> list[np.ndarray]:
        """A box's positions (domain ids, or -1 - token) as their tokens."""
        return [self.domains[g] if g >= 0 else np.array([-1 - g]) for g in dom]

    # -- leaves -------------------------------------------------------------------------------
    def _members(self, boxes: _Boxes) -> tuple[np.ndarray, np.ndarray]:
        """Every input of small boxes (tokens, and the case of each)."""
        members, case_of = [], []
        for b in range(len(boxes)):
            lists = self._tokens(boxes.dom[b])
            grid = product_rows(lists)
            members.append(grid)
            case_of.append(np.full(len(grid), boxes.case[b]))
        return np.concatenate(members), np.concatenate(case_of)

    def _evaluate(self, tokens: np.ndarray, case_of: np.ndarray, found: list, must_fail: bool) -> None:
        """Judge inputs on the evaluator; note the failures.  `must_fail`: the bounds say every
        member of their boxes fails, so one that does not is an internal error."""
        answers, valid = self.task.evaluate(tokens)
        tokens, answers, case_of = tokens[valid], answers[valid], case_of[valid]
        if not len(tokens):
            return
        ev = self._leaf_evaluator()
        size = ev.batch_size(tokens.shape[1])
        for a in range(0, len(tokens), size):
            sl = slice(a, a + size)
            judged = ev.judge(ev.forward(tokens[sl]), answers[sl])
            if must_fail and not judged.failed.all():
                r = int(np.flatnonzero(~judged.failed)[0])
                raise InternalError(f"the bounds say every input of a box fails, but the evaluator gets "
                                    f"{self.task.render(tokens[sl][r])} right")
            for r in np.flatnonzero(judged.failed):
                found.append((int(case_of[sl][r]), Found.of(judged, int(r), self.task.index_of(tokens[sl][r]),
                                                            tokens[sl][r])))

    def _leaf_evaluator(self) -> Evaluator:
        """The generic path for a few leaves; the evaluator's layer-0 tables once many are enumerated
        (when they fit)."""
        if self._leaf_ev is None and self.stats.leaf_inputs > LEAF_TABLES_AFTER:
            self._leaf_ev = fitting_evaluator(self.m.ev.model, self.fx)
        return self._leaf_ev or self.m.ev


def _code_points(fx, olo: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every code point of each row's box, whose coordinates run over `width` consecutive ranks from
    `olo` (rows, k): the row of each point, the points (points, k) as codes, and where each row's
    points start."""
    count = np.prod(width, axis=1).astype(np.int64)
    row_of = np.repeat(np.arange(len(olo)), count)
    starts = np.cumsum(count) - count
    local = np.arange(count.sum()) - np.repeat(starts, count)
    w = width.astype(np.int64)[row_of]
    stride = np.cumprod(np.concatenate([np.ones((len(w), 1), np.int64), w[:, :-1]], axis=1), axis=1)
    return row_of, fx.from_ordinal(olo[row_of] + (local[:, None] // stride) % w), starts


def _own_columns(layer) -> np.ndarray:
    """(d,) the columns of the FFN's output that depend on the same column of its input only: every
    unit that writes the column reads that column alone (a residual FFN adds the column itself)."""
    reads = layer.W1 != 0  # (h, d)
    own = np.ones(layer.W2.shape[0], dtype=bool)
    for c in range(len(own)):
        units = np.flatnonzero(layer.W2[c] != 0)
        own[c] = not reads[units][:, np.arange(reads.shape[1]) != c].any()
    return own


def _rows(x: np.ndarray) -> np.ndarray:
    """(n, ...) -> (n, everything else), also when a dimension is 0."""
    return x.reshape(x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64)))


def _max_others(y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(B,) the max of y (B, C) over the columns other than t."""
    rows = np.arange(len(y))
    z = y.copy()
    z[rows, t] = lowest(z.dtype)
    return z.max(axis=1)


def _children(boxes: _Boxes, parent: np.ndarray, j: np.ndarray, tokens: np.ndarray) -> _Boxes:
    """Boxes `parent` with position j (of each parent) set to `tokens`, one branching deeper, each
    with its own positions."""
    kids = boxes.take(parent)
    kids.dom[np.arange(len(parent)), j[parent]] = -1 - tokens
    kids.depth += 1
    kids.prefix[:] = -1
    return kids


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of an integer array (n, k): the index of each one's first occurrence and
    each row's distinct-row number.  Columns are ranked one at a time and folded into one int64
    code (re-ranked before it could overflow): several 1-d sorts, much faster than sorting rows."""
    code = np.zeros(len(a), dtype=np.int64)
    varies = (a.min(axis=0) != a.max(axis=0)) if len(a) else np.zeros(a.shape[1], dtype=bool)
    for col in a.T[varies]:  # a constant column splits nothing
        _, r = np.unique(col, return_inverse=True)
        r = r.reshape(-1)
        if len(r) and (int(code.max()) + 1) * (int(r.max()) + 1) >= 1 << 62:
            code = np.unique(code, return_inverse=True)[1].reshape(-1)
        code = code * (int(r.max(initial=0)) + 1) + r
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)


def _same_domains(a: Sequence, b: Sequence, ida: list, idb: list) -> bool:
    """Do two lists hold the same domains, position by position?  Consecutive cases share array
    objects (`ida`, `idb`: their ids); only the positions whose objects differ are compared by content."""
    if len(a) != len(b):
        return False
    if ida == idb:
        return True
    return all(i == j or (len(x) == len(y) and np.array_equal(x, y)) for x, y, i, j in zip(a, b, ida, idb))


def _distinct_rows(ids: np.ndarray) -> np.ndarray:
    """(L, n) ids -> (L, W): each row's distinct ids first, padded by repeating its first one."""
    s = np.sort(ids, axis=1)
    new = np.ones(s.shape, dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    W = int(new.sum(axis=1).max(initial=1))
    order = np.argsort(~new, axis=1, kind="stable")[:, :W]
    out = np.take_along_axis(s, order, axis=1)
    filled = np.arange(W)[None, :] < new.sum(axis=1)[:, None]
    return np.where(filled, out, out[:, :1])
