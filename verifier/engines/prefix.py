"""The prefix engine: a causal transformer against a task given by a DFA, every prefix at once.

The transformer analogue of the reach engine (`reach`).  When every attention head of the model is,
in every layer, one of

* *uniform*: its logits are equal at every key (its query map is 0, or its key map reads nothing,
  `aggregate.uniform`), so every key gets the one weight a_t of query position t (the
  evaluator's own softmax on a row of t + 1 equal logits);
* *silent*: its columns of W_O are 0, so it writes nothing (its output is multiplied by 0);
* in the first layer only, *local*: keys before a window of the last w positions weigh exactly 0
  (`locality.first_layer_window`, certified from the layer-0 logit tables),

then the model's output at position t is a function of a finite summary of x_0 .. x_t: the last
w tokens, and for each uniform head the histogram of its value codes over the positions j <= t
(its output at t is the saturated rounding of an exact sum of terms term(a_t, v_j), `Fixed.terms`,
whatever their order).  A later layer's value code at t is a function of the layers below at t
only, so the summary after x_{t+1} is a function of the summary after x_t and x_{t+1}: the engine
explores the pairs (summary, DFA state) breadth first, one length per round, vectorised over the
frontier and the alphabet, and checks the readout at t of every new pair against the DFA's answer.
Position t's residual goes through every layer by the evaluator's own functions (`_attend`,
`finish_layer`, `scores`) on the composed rows, so its codes are the evaluator's.

*Merging.*  For a first-layer uniform head the value codes are known in advance (a table over
(position, token)).  Let T be the integer matrix of term(a_t', c) over codes c (rows) and future
positions t' > t times value dimensions (columns).  Two histograms h, h' of one length give the
head the same output at every future position iff (h - h') T = 0, so a state is keyed by h T_J,
J columns of T that form a basis of its column space (chosen by exact elimination over the
rationals), and one representative histogram is kept to compute with: every member agrees with it
on every column.  For Dyck-(2,2) (`constructions.dyck`) the counts (n_(, n_), n_[, n_]) become
A = n_( - n_) and B = n_[ - n_].  A later layer's histogram is kept whole, over the codes seen so far.

A failing pair is rebuilt into the inputs of its length that reach it (the parents of every merged
pair are kept); those lengths and longer are then not covered.  With overflow = saturate only
(under error, a saturation in a term of a merged member would count and the representative's may
not); fixed-point codes; causal softmax layers; a readout at every position of a model without its
own BOS; the task's inputs every string up to N after its start token.  More than MAX_STATES
candidate pairs at one length are refused (`TooLarge`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Optional, cast

import numpy as np

from ..arithmetic import Fixed
from ..evaluator import Evaluator, _Layer0Tables, readout_margins
from ..layer0 import ClassTable
from ..locality import first_layer_window
from ..model import Model
from ..support.budget import TimedOut, TooLarge
from ..support.errors import InternalError
from ..verdicts import Status
from .aggregate import uniform
from .base import EngineResult, Found, Problem, RunOptions, Tick, group_rows, saturating_codes

MAX_STATES = 1 << 23  # candidate pairs (kept pairs x symbols) of one length
CHUNK = 1 << 15  # candidate pairs computed at once
CHECKED = 4  # candidates per length also evaluated from their tokens alone
LISTED = 1 << 16  # failing inputs rebuilt at most
MAX_WINDOW_CODES = 1 << 16  # token windows of the local heads (the pairs keep the window's tokens)


@dataclass
class _Counts:
    """A uniform head's histogram of value codes: its codes (C, m_v) and, in the first layer, the
    code of every (position, token) row (later layers: codes as they appear, `index`)."""

    layer: int
    head: int
    codes: np.ndarray
    row_code: Optional[np.ndarray] = None
    seen: dict = field(default_factory=dict)  # later layers: code bytes -> column

    def index(self, v: np.ndarray) -> np.ndarray:
        """The columns of value codes v (P, m_v), adding the new ones."""
        uniq, inv = np.unique(v, axis=0, return_inverse=True)
        cols = np.empty(len(uniq), np.int64)
        for k, row in enumerate(uniq):
            cols[k] = self.seen.setdefault(row.tobytes(), len(self.seen))
            if cols[k] == len(self.codes):
                self.codes = np.vstack([self.codes, row[None, :]])
        return cols[inv.reshape(-1)]


@dataclass
class _Plan:
    """How the engine reads the model: per layer, per head, its kind; the first layer's window."""

    ev: Evaluator
    kinds: list[list[str]]  # "uniform", "silent" or "local"
    width: int  # the local heads' window: keys i - width .. i


@dataclass
class _States:
    """Pairs (summary, DFA state), one row each."""

    window: np.ndarray  # (S, width) the last tokens, oldest first (-1: before position 0)
    first: list[np.ndarray]  # per first-layer uniform head, a representative histogram (S, C)
    later: list[np.ndarray]  # per later uniform head, the histogram (S, codes seen)
    dfa: np.ndarray  # (S,)


@dataclass
class _Round:
    """One length's candidates, (parent pair, symbol) row by row: candidate c is pair c // n's with
    token symbols[c % n] (not stored per candidate: they are many); the kept pair each merged into;
    the kept pairs' first candidates."""

    symbols: np.ndarray
    kept: np.ndarray
    first: np.ndarray

    def parent(self, c: np.ndarray | int) -> Any:
        return c // len(self.symbols)

    def token(self, c: np.ndarray | int) -> Any:
        return self.symbols[c % len(self.symbols)]


class Prefix:
    name = "prefix"
    symbolic = True  # it evaluates one pair per class of prefixes, not every input: `api` sample-checks

    def __init__(self) -> None:
        self._last: Optional[tuple[Problem, _Plan | str]] = None  # the plan `unsupported` made, for `run`

    def unsupported(self, problem: Problem, opts: RunOptions) -> Optional[str]:
        model, task = problem.model, problem.task
        if not isinstance(model, Model):
            return "it decides transformers (the reach engine decides recurrent models)"
        why = saturating_codes(problem, "a saturation in a term of a merged prefix")
        if why is not None:
            return why
        if task.dfa is None or getattr(task, "bos", None) is None or not getattr(task, "per_position", False):
            return f"task {task.name} is not given by a DFA over every string after a start token"
        if model.bos is not None or model.readout.positions != "all":
            return "it decides a readout at every position of a model without its own BOS"
        if any(not layer.causal or layer.attention != "softmax" for layer in model.layers):
            return "it decides causal softmax layers"
        if not opts.whole(task.total):
            return "--start/--stop select inputs by enumeration; the prefix engine decides whole lengths"
        kinds, why = _kinds(model)
        if why is not None:
            return why
        plan = self._plan(problem)
        return plan if isinstance(plan, str) else None

    def _plan(self, problem: Problem) -> _Plan | str:
        """The plan, or why the first layer is not local (made once for `unsupported` and `run`)."""
        if self._last is not None and self._last[0] is problem:
            return self._last[1]
        kinds, _ = _kinds(cast(Model, problem.model))
        ev = Evaluator(cast(Model, problem.model), problem.arith)
        width = _window(ev, kinds) if "local" in kinds[0] else 0
        plan = width if isinstance(width, str) else _Plan(ev, kinds, width)
        self._last = (problem, plan)
        return plan

    def run(self, problem: Problem, opts: RunOptions) -> EngineResult:
        t0 = time.monotonic()
        plan = self._plan(problem)
        self._last = None
        assert isinstance(plan, _Plan), "`unsupported` saw why not"
        task = cast(Any, problem.task)  # a DFA task (`unsupported` saw it): bos, accepting, count_up_to
        walk = _Walk(plan, task)
        result = EngineResult(Status.COMPLETE, 0, [])
        rounds: list[_Round] = []
        states = walk.start()
        margin, tightest = np.inf, (0, 0)
        bad: Optional[np.ndarray] = None
        largest, t = 1, -1
        try:
            for t in range(task.N + 1):
                opts.deadline.check()
                if len(states.dfa) * walk.A > MAX_STATES:
                    raise TooLarge(f"{len(states.dfa) * walk.A:,} candidate pairs at length {t}, more than the "
                                   f"{MAX_STATES:,} the prefix engine takes")
                symbols = np.arange(walk.A) if t else np.array([task.bos])
                kept, first, new, dfa, y, of = walk.step(t, states, symbols, opts)
                expected = np.isin(dfa, task.accepting)
                # per distinct readout row, then per candidate: the rows are few, the candidates many
                pred, tie = walk.ev._decide(y)
                ro = walk.ev.q.readout
                real = walk.ev.arith.to_real(y)
                m = np.where(expected, *(readout_margins(real, np.full(len(y), e), ro.kind, float(ro.theta))[of]
                                         for e in (1, 0)))
                rounds.append(_Round(symbols, kept, first))
                walk.check(rounds, t, y, of)
                fails = np.flatnonzero((pred[of] != expected) | tie[of])
                if len(fails):
                    bad = fails
                    break
                j = int(np.argmin(m))
                if m[j] < margin:
                    margin, tightest = float(m[j]), (t, j)
                states = new
                largest = max(largest, len(first))
                if opts.progress:
                    opts.progress(Tick(task.count_up_to(t), task.total, case=f"length {t}, {len(first):,} pairs"))
        except KeyboardInterrupt:
            result.status = Status.INTERRUPTED
        except TimedOut:
            result.status = Status.TIMEOUT
        done = task.N if bad is None and result.status == Status.COMPLETE else t - 1
        result.covered = task.count_up_to(max(done, 0))
        if bad is not None:
            result.found = walk.found(rounds, t, bad, opts.max_counterexamples)
        elif result.status == Status.COMPLETE:
            tokens = walk.inputs(rounds, *tightest)[0]
            result.min_margin, result.tightest = margin, task.index_of(tokens)
        result.stats = {"largest_length_pairs": largest, "lengths_explored": max(done, 0), "window": plan.width,
                        "seconds": round(time.monotonic() - t0, 3)}
        return result


def _kinds(model: Model) -> tuple[list[list[str]], Optional[str]]:
    """Each head's kind (module docstring), or why some head has none."""
    kinds = []
    for li, layer in enumerate(model.layers):
        row, at = [], 0
        for hi, head in enumerate(layer.heads):
            cols = slice(at, at + head.W_V.shape[0])
            at = cols.stop
            if not np.any(layer.W_O[:, cols]):
                row.append("silent")
            elif uniform(head):
                row.append("uniform")
            elif li == 0:
                row.append("local")
            else:
                return [], (f"layer {li}'s head {hi} gives its keys different logits and writes to the stream (the "
                            f"prefix engine takes later heads that average every key or write nothing)")
        kinds.append(row)
    return kinds, None


def _window(ev: Evaluator, kinds: list[list[str]]) -> int | str:
    """The first layer's local heads' window width (`locality.first_layer_window`), or why none."""
    tables = ev.tables.logits if ev.tables is not None else None
    if tables is None:
        return "its first layer's logit table does not fit, and its locality cannot be certified"
    L, V = ev.q.max_len, len(ev.q.vocab)
    local = [tables[h] for h, kind in enumerate(kinds[0]) if kind == "local"]
    empty_values, empty_ovf = np.zeros((0, 0), np.int64), np.zeros(0, bool)
    window, why = first_layer_window(cast(Fixed, ev.arith), [ClassTable(t.q_row.reshape(L, V), empty_values, empty_ovf)
                                                            for t in local],
                                     [ClassTable(t.k_row.reshape(L, V), empty_values, empty_ovf) for t in local],
                                     [t.values for t in local], [t.ovf for t in local], L, MAX_WINDOW_CODES)
    return why if window is None else window.width


def _live(q: Model, kinds: list[list[str]]) -> list[np.ndarray]:
    """Per layer l >= 1, the columns of its input row at t that the model reads at t (later layers'
    value codes, FFNs, the readout), through the residual: the others may differ between candidates
    computed as one.  A map's output column reads only its row's nonzero columns (`Fixed.rows_apart`)."""
    def cols(W: np.ndarray) -> set[int]:
        return set(np.flatnonzero(np.any(W != 0, axis=0)).tolist())

    live = cols(q.readout.W_U)
    out: list[np.ndarray] = [np.zeros(0, np.int64)] * len(q.layers)
    for li in range(len(q.layers) - 1, 0, -1):
        layer = q.layers[li]
        live |= cols(cast(np.ndarray, layer.W1)) if layer.has_ffn else set()
        for head, kind in zip(layer.heads, kinds[li]):
            live |= cols(head.W_V) if kind == "uniform" else set()
        out[li] = np.array(sorted(live), np.int64)
    return out


def basis_columns(T: np.ndarray) -> list[int]:
    """Columns of the integer matrix T that form a basis of its column space, chosen in order by
    exact elimination over the rationals (never a float rank)."""
    pivots: list[int] = []
    rows: list[list[Fraction]] = []  # reduced columns, each zero at the earlier pivots
    chosen: list[int] = []
    _, firsts = np.unique(T.T, axis=0, return_index=True)  # a repeated column adds nothing
    for j in sorted(int(c) for c in firsts):
        v = [Fraction(int(x)) for x in T[:, j]]
        for p, r in zip(pivots, rows):
            if v[p]:
                f = v[p] / r[p]
                v = [a - f * b for a, b in zip(v, r)]
        nz = next((i for i, a in enumerate(v) if a), None)
        if nz is not None:
            pivots.append(nz)
            rows.append(v)
            chosen.append(j)
            if len(chosen) == T.shape[0]:
                break
    return chosen


class _Walk:
    """The model read one position at a time on composed rows."""

    def __init__(self, plan: _Plan, task) -> None:
        self.ev, self.kinds, self.width, self.task = plan.ev, plan.kinds, plan.width, task
        self.arith = cast(Fixed, self.ev.arith)
        self.A, self.V, self.N = task.dfa.shape[1], len(self.ev.q.vocab), task.N
        tables = self.ev.tables
        assert tables is not None, "the evaluator is built with its tables"
        self.tables = tables
        # a_t for t = 0..N: the evaluator's softmax on a row of t + 1 equal logits
        self.weight = np.array([self.arith.softmax(np.zeros((1, t + 1), np.int64), None, self.arith.context((1,)),
                                                   "uniform")[0, 0] for t in range(self.N + 1)])
        self.counts: list[_Counts] = []
        for li, row in enumerate(self.kinds):
            for hi, kind in enumerate(row):
                if kind != "uniform":
                    continue
                if li == 0:
                    codes, row_code = np.unique(tables.v[hi], axis=0, return_inverse=True)
                    self.counts.append(_Counts(0, hi, codes, row_code.reshape(-1)))
                else:
                    mv = self.ev.q.layers[li].heads[hi].W_V.shape[0]
                    self.counts.append(_Counts(li, hi, np.zeros((0, mv), np.int64)))
        self.by_head = {(c.layer, c.head): c for c in self.counts}
        self.firsts = [c for c in self.counts if c.layer == 0]
        self.laters = [c for c in self.counts if c.layer > 0]
        # per first-layer head, the terms at every position (N + 1, C, m_v) and the basis of the
        # future columns after each t
        self.terms = [self._terms(c, np.arange(self.N + 1)) for c in self.firsts]
        self.live = _live(self.ev.q, self.kinds)
        self.basis = [[basis_columns(T[t + 1:].transpose(1, 0, 2).reshape(len(c.codes), -1))
                       for t in range(self.N + 1)] for c, T in zip(self.firsts, self.terms)]

    def _terms(self, counts: _Counts, ts: np.ndarray) -> np.ndarray:
        """term(a_t, c) for t in ts, every code c: (len(ts), C, m_v)."""
        prod = self.weight[ts][:, None, None] * counts.codes[None, :, :]
        return self.arith.terms(prod, self.arith.context(prod.shape), f"L{counts.layer}.H{counts.head}.out")

    def start(self) -> _States:
        """The pair before position 0: no tokens, empty histograms, the DFA's start."""
        return _States(np.full((1, self.width), -1, np.int64), [np.zeros((1, len(c.codes)), np.int64)
                                                                for c in self.firsts],
                       [np.zeros((1, 0), np.int64) for _ in self.laters], np.zeros(1, np.int64))

    def step(self, t: int, states: _States, symbols: np.ndarray, opts: RunOptions
             ) -> tuple[np.ndarray, np.ndarray, _States, np.ndarray, np.ndarray, np.ndarray]:
        """Position t of every candidate, (parent pair, symbol) row by row (`_Round`; n symbols):
        (the kept pair each merges into, the first candidate of each kept
        pair, the kept pairs, each candidate's DFA state, the readout scores of the distinct last
        rows, each candidate's row).  A layer's
        output at t is a function of its input at t and its heads' outputs, so each layer is
        computed once per distinct (input row, head outputs) among
        the candidates (`group_rows`), by the evaluator's own functions; of its input row, only the
        columns that the rest of the model reads at t (`_live`).  A uniform head's sum over a
        candidate's histogram is its parent's sum plus the new code's term (exact integers): the
        parents are n times fewer, and the candidates' first-layer histograms are not built."""
        ev, arith, q = self.ev, self.arith, self.ev.q
        n = len(symbols)
        P = len(states.dfa) * n

        def spread(parents: np.ndarray, new: np.ndarray) -> np.ndarray:
            """(k, pairs) and (k, n): each candidate's column of its parent's plus its symbol's."""
            return (parents[:, :, None] + new[:, None, :]).reshape(len(parents), P)

        # columns one row each (candidates along a row): `group_rows` reads each column at a stride of 1
        full = np.concatenate([np.repeat(states.window.T, n, axis=1), np.tile(symbols, len(states.dfa))[None, :]])
        # ^ the tokens at positions t - width .. t
        keys = full[max(0, self.width - t):]  # those >= 0: the local heads' keys
        dfa = (self.task.dfa[states.dfa][:, symbols] if t else np.repeat(states.dfa, n)).reshape(-1)
        first: list[np.ndarray] = []  # per first-layer uniform head, each symbol's new code
        later: list[np.ndarray] = []  # per later uniform head, each candidate's histogram (codes, P)
        X: Any = None  # the distinct rows of the stream at t (after the first layer) ...
        of: Any = None  # ... and each candidate's
        for li, layer in enumerate(q.layers):
            opts.deadline.check()
            sums = {}
            for hi, kind in enumerate(self.kinds[li]):
                if kind != "uniform":
                    continue
                c = self.by_head[li, hi]
                if li == 0:
                    col, old = cast(np.ndarray, c.row_code)[t * self.V + symbols], states.first[len(first)]
                    first.append(col)
                    term = self._terms(c, np.array([t]))[0].T  # (m_v, codes)
                    sums[hi] = spread(term @ old.T, np.take(term, col, axis=1))
                    continue
                col = c.index(ev._lin(layer.heads[hi].W_V, X, layer.heads[hi].b_V, arith.context(X.shape[:-1]),
                                      f"L{li}.H{hi}.v")[:, 0])[of]
                old, term = states.later[len(later)], self._terms(c, np.array([t]))[0].T  # codes seen so far
                h = np.zeros((len(c.codes), P), np.int64)
                h[:old.shape[1]] = np.repeat(old.T, n, axis=1)
                h[col, np.arange(P)] += 1
                later.append(h)
                sums[hi] = np.repeat(term[:, :old.shape[1]] @ old.T, n, axis=1) + np.take(term, col, axis=1)
            read = list(keys) if li == 0 else \
                [group_rows([X[:, 0, self.live[li]], np.zeros(len(X), np.int64)])[0][of]]
            group, rep = group_rows(read + [v for sv in sums.values() for v in sv])
            X = _by_chunks(len(rep), lambda c, li=li, X=X, rep=rep, of=of, sums=sums:
                           self._layer(li, t, X, rep[c], symbols, keys, of, sums))
            of = group
        y = _by_chunks(len(X), lambda c: ev.scores(X[c, 0], arith.context((len(X[c]),))))
        future = []  # each first-layer histogram's terms at the basis of the future columns (J, P)
        for k, (c, T, basis) in enumerate(zip(self.firsts, self.terms, self.basis)):
            TJ = T[t + 1:].transpose(1, 0, 2).reshape(len(c.codes), -1)[:, basis[t]].T
            future.append(spread(TJ @ states.first[k].T, np.take(TJ, first[k], axis=1)))
        group, rep = group_rows([*full[1:], *(v for f in future for v in f), *(v for h in later for v in h), dfa])
        hist = [states.first[k][rep // n] for k in range(len(first))]
        for h, col in zip(hist, first):
            h[np.arange(len(rep)), col[rep % n]] += 1
        kept = _States(full[1:, rep].T, hist, [h[:, rep].T for h in later], dfa[rep])
        return group, rep, kept, dfa, y, of

    def _layer(self, li: int, t: int, X: Optional[np.ndarray], rep: np.ndarray, symbols: np.ndarray,
               keys: np.ndarray, of: Optional[np.ndarray], sums: dict[int, np.ndarray]) -> np.ndarray:
        """Layer li at position t for candidates `rep`: its output rows (n, 1, d)."""
        ev, arith = self.ev, self.arith
        layer = ev.q.layers[li]
        n = len(rep)
        r = t * self.V + symbols[rep % len(symbols)]  # their (position, token) rows
        ctx = arith.context((n, 1))
        outs = []
        for hi, kind in enumerate(self.kinds[li]):
            name = f"L{li}.H{hi}"
            if kind == "silent":  # times W_O's zero columns
                outs.append(np.zeros((n, 1, layer.heads[hi].W_V.shape[0]), np.int64))
            elif kind == "local":
                table = cast(list, cast(_Layer0Tables, self.tables).logits)[hi]
                krows = np.arange(t + 1 - len(keys), t + 1) * self.V + keys[:, rep].T
                S = table.values[table.q_row[r][:, None, None], table.k_row[krows][:, None, :]]
                outs.append(ev._attend(layer, name, S, self.tables.v[hi][krows], None, ctx))
            else:
                outs.append(arith.total(sums[hi][:, rep].T, None, ctx, f"{name}.out")[:, None, :])
        Xq = self.tables.x0[r][:, None, :] if li == 0 else cast(np.ndarray, X)[cast(np.ndarray, of)[rep]]
        return ev.finish_layer(li, Xq, outs, ctx)

    def inputs(self, rounds: list[_Round], t: int, c: int) -> list[np.ndarray]:
        """The shortest input through candidate c of length t, as a list of one (the start token
        alone is not an input: a first symbol is added)."""
        tokens = [int(rounds[t].token(c))]
        s = int(rounds[t].parent(c))
        for u in range(t - 1, -1, -1):
            c = int(rounds[u].first[s])
            tokens.append(int(rounds[u].token(c)))
            s = int(rounds[u].parent(c))
        tokens = tokens[::-1] + ([0] if t == 0 else [])
        return [np.array(tokens, np.int64)]

    def check(self, rounds: list[_Round], t: int, y: np.ndarray, of: np.ndarray) -> None:
        """The readout at t of a few candidates (scores y[of]), evaluated from their tokens alone, is the
        composed one."""
        picks = np.unique(np.r_[np.arange(min(CHECKED, len(of))), len(of) - 1])
        tokens = np.stack([self.inputs(rounds, t, int(c))[0] for c in picks])
        scores = self.ev.forward(tokens).scores[:, t]
        if not np.array_equal(scores, y[of[picks]]):
            raise InternalError(f"the prefix engine's composed readout at position {t} differs from the evaluator's "
                                f"on {self.task.render(tokens[0])}: its merged states are wrong")

    def found(self, rounds: list[_Round], t: int, bad: np.ndarray, limit: int) -> list[Found]:
        """The inputs of length t through the failing candidates `bad` (every member of their parents'
        merged pairs, up to LISTED), the first `limit` in enumeration order."""
        task = self.task
        if t == 0:  # every input fails at the start token: the shortest ones
            tokens = np.array([[task.bos, a] for a in range(self.A)], np.int64)
        else:
            tokens = self._members(rounds, t, bad)
        # one length, s_1 most significant: the enumeration's order is the lexicographic one
        tokens = tokens[np.lexsort(tokens.T[::-1])[:max(1, limit)]]
        judged = self.ev.judge(self.ev.forward(tokens), task.evaluate(tokens)[0])
        found = [Found.of(judged, j, task.index_of(tokens[j]), tokens[j]) for j in range(len(tokens))]
        if not all(judged.failed):
            raise InternalError(f"an input the prefix engine rebuilt for a failing pair at position {t} passes")
        return found

    def _members(self, rounds: list[_Round], t: int, cands: np.ndarray) -> np.ndarray:
        """Every prefix through candidates `cands` of length t (at most LISTED), back along the
        merged pairs' candidates."""
        suffix = rounds[t].token(cands)[:, None]
        state = rounds[t].parent(cands)
        for u in range(t - 1, -1, -1):
            rd = rounds[u]
            order = np.argsort(rd.kept, kind="stable")
            count = np.bincount(rd.kept, minlength=len(rd.first))
            start = np.concatenate([[0], np.cumsum(count)[:-1]])
            n = count[state]
            keep = np.cumsum(n) <= LISTED
            keep[0] = True
            state, suffix, n = state[keep], suffix[keep], n[keep]
            row = np.repeat(np.arange(len(state)), n)
            offset = np.arange(len(row)) - np.repeat(np.cumsum(n) - n, n)
            c = order[start[state][row] + offset]
            suffix = np.concatenate([rd.token(c)[:, None], suffix[row]], axis=1)
            state = rd.parent(c)
        return suffix


def _by_chunks(n: int, fn) -> np.ndarray:
    """fn(slice) over 0..n a CHUNK at a time, concatenated (its temporaries stay bounded)."""
    return np.concatenate([fn(slice(a, min(n, a + CHUNK))) for a in range(0, max(n, 1), CHUNK)])
