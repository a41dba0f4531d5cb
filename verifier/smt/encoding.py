"""The SMT encoding of "this model fails on some input of this case" (docs/smt-encoding.md).

`encode` mirrors `Evaluator.forward` (or `RecurrentEvaluator.forward`) operation by operation on
`Sym` values: layer 0 comes from the evaluator's own (position, token) tables, so every quantity
that depends on one token is a numpy table computed by the evaluator's arithmetic, and only
mixtures of tokens reach z3.  The
formula is the negation of the task's specification: the readout's strict argmax is not the
answer (a tie counts as a failure), or a threshold bit is wrong, or, under ``overflow = error``,
something the answer depends on saturated (`evaluator.Cone`); for a readout at every position, a
failure at any position that has an answer (a truth of `NO_ANSWER` is not judged).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import z3

from ..arithmetic import Fixed, threshold_code
from ..evaluator import Cone, Evaluator, RecurrentEvaluator, make_evaluator, read_from, readout_margins, trace
from ..floats import FloatArith
from ..support.budget import Deadline
from ..tasks import Case
from ..tasks.base import NO_ANSWER
from .floats import SymFloat, TableTooLarge
from .symbolic import Sym, SymFX


@dataclass
class Encoding:
    case: Case
    sfx: SymFX
    fail: Sym  # Bool: the model fails on the input
    scores: list  # the readout codes; for a readout at every position, one list per position
    truth: Sym | list  # the expected answer; for a readout at every position, one per position
    trace: dict  # evaluator names (L0.H0.attn, L0.out, ...) -> nested lists of Sym, query positions first
    readout: object  # the model's Readout (kind, theta)
    valid: Sym | None = None  # Bool: a member of the case's box is an input of the task (None: every one)
    shared: bool = False  # built on a larger box's forward pass (`Encoder`): tables are over its domains

    def at(self, value: Sym, tokens):
        """A value of the encoding at a concrete input of the case (a Python int or bool)."""
        if value.is_const:
            return value.value()
        if value.expr is None:
            return value.table[int(np.flatnonzero(self.sfx.domains[value.var] == tokens[value.var])[0])].item()
        subs = [(t, self.sfx.num(tokens[j], t if z3.is_bv(t) else None))
                for j, t in enumerate(self.sfx.tokens) if t is not None]
        v = z3.simplify(z3.substitute(value.expr, *subs))
        if z3.is_fp(v):
            return self.sfx.value_of(v)
        return z3.is_true(v) if z3.is_bool(v) else (v.as_signed_long() if z3.is_bv(v) else v.as_long())

    def margins(self) -> tuple[np.ndarray, int | None] | None:
        """Readout margins in codes over the case's inputs, when they all depend on one token.

        argmax: the answer's score minus the best other score; threshold: the smallest signed
        distance to theta (as `Evaluator.margins`).  Returns (margins indexed by that token's
        domain, the token's position) (one entry and None if nothing depends on a token); None when
        a score or the answer mixes tokens, or the case filters its inputs.
        """
        if isinstance(self.truth, list) or self.shared:  # several positions' tokens, or a larger box's
            return None
        values = self.scores + [self.truth]
        if self.case.valid is not None or any(y.expr is not None for y in values):
            return None
        dependent = {y.var for y in values if y.var is not None}
        if len(dependent) > 1:
            return None
        var = dependent.pop() if dependent else None
        n = 1 if var is None else len(self.case.domains[var])
        y = np.array([np.broadcast_to(s.table, (n,)) for s in self.scores]).T  # (n, C) codes
        truth = np.broadcast_to(self.truth.table, (n,))
        unit = self.sfx.fx.step if isinstance(self.sfx.fx, Fixed) else 1  # a float's value is itself
        theta = float(Fraction(self.readout.theta) / unit)  # margins are reported, never decide
        return readout_margins(y, truth, self.readout.kind, theta), var

    def holds_at(self, tokens) -> bool:
        """Does the failure formula hold at this concrete input of the case?"""
        return bool(self.at(self.fail, tokens))

    def contains(self, tokens) -> bool:
        """Is this token sequence an input of the case: in its box, and valid?"""
        doms = self.case.domains
        in_box = len(tokens) == len(doms) and all(t in d for t, d in zip(tokens, doms))
        return in_box and (self.valid is None or bool(self.at(self.valid, tokens)))

    def compare(self, ev: Evaluator | RecurrentEvaluator, tokens) -> str:
        """Both traces at an input: the first intermediate where the encoding and the evaluator differ."""
        _, values = trace(make_evaluator(ev.model, ev.arith, tables=False), np.asarray(tokens))

        def value(x):
            return [value(y) for y in x] if isinstance(x, list) else self.at(x, tokens)

        for name, syms in list(self.trace.items()) + [("readout.scores", self.scores)]:
            mine, theirs = np.array(value(syms)), values.get(name)
            if theirs is not None and mine.reshape(-1).tolist() != np.asarray(theirs).reshape(-1).tolist():
                return f"first difference at {name}: encoding {mine.tolist()}, evaluator {np.asarray(theirs).tolist()}"
        return "no intermediate differs"


def bit_width(ev: Evaluator | RecurrentEvaluator) -> int:
    """Bit-vector width that holds every intermediate before rounding or saturation, and every
    constant of the specification (docs/smt-encoding.md, "Widths").

    Forward pass: the format's `smt_width` for sums of T products (FX: a sum of T products of p-bit
    codes plus a shifted bias is below (T + 2) 2^(2p-2), so 2p - 1 + ceil(log2(T + 2)) bits hold
    it, with slack; another grid: the bit length of its largest raw sum, with slack).  Specification: a count is below T
    (T counts the positions too), a class index needs bit_length(C) + 1 bits, and a threshold
    readout's answer is a pattern of C bits.  `SymFX.num` refuses any constant that still does not fit."""
    # a float format's forward pass is floating-point terms: only the specification's integers are bit-vectors
    forward = ev.arith.smt_width(ev.q.widest_sum()) if isinstance(ev.arith, Fixed) else 0
    C = ev.q.readout.W_U.shape[0]
    answer = C + 2 if ev.q.readout.kind == "threshold" else C.bit_length() + 2
    return max(forward, answer)


class _Maps:
    """The evaluator's linear maps and residual sums on `Sym` values, operation by operation."""

    def __init__(self, S: SymFX, deadline: Deadline | None):
        self.S, self.fx, self.deadline = S, S.fx, deadline
        self.track = S.fx.overflow == "error"
        self._supports: dict[int, tuple] = {}

    def lin(self, W, x, b=None):
        """W x + b.  Rows that read constants and lookups of at most one token are computed on
        tables by the evaluator's own linear rule, all such rows of a token at once (a zero weight
        contributes nothing in any rule, so a row may skip the columns it does not read); only
        rows that read a term or mix tokens are built product by product."""
        S = self.S
        if self.deadline is not None:  # checked per map and per query position: no step takes long
            self.deadline.check()
        kind = np.array([-2 if s.is_term else -1 if s.var is None else s.var for s in x], dtype=np.int64)
        groups = np.unique(kind)
        support = self._support(W)  # (out, in) as floats: one matrix product says which groups a row reads
        reads = support @ (kind[:, None] == groups[None, :]).astype(np.float32) > 0 if len(x) else \
            np.zeros((W.shape[0], 0), bool)
        tokens = groups >= 0
        simple = ~reads[:, groups == -2].any(axis=1) & (reads[:, tokens].sum(axis=1) <= 1)
        out: list = [None] * W.shape[0]
        for j in [None, *groups[tokens]]:
            if j is None:
                rows = np.flatnonzero(simple & ~reads[:, tokens].any(axis=1))
            else:
                rows = np.flatnonzero(simple & reads[:, np.flatnonzero(groups == j)[0]])
            if len(rows):
                cols = np.flatnonzero(((kind == -1) | (kind == (-1 if j is None else j))) & support[rows].any(axis=0))
                Y = self._table_lin(None if j is None else int(j), W[np.ix_(rows, cols)], [x[c] for c in cols],
                                    None if b is None else b[rows])
                for r, y in zip(rows, Y):
                    out[r] = y
        for r in np.flatnonzero(~simple):
            cols = np.flatnonzero(W[r])
            out[r] = self.dot([S.const(W[r, c]) for c in cols], [x[c] for c in cols], None if b is None else b[r])
        return out

    def _support(self, W) -> np.ndarray:
        key = id(W)
        if key not in self._supports:
            self._supports[key] = (W, (W != 0).astype(np.float32))  # W kept alive: its id stays its own
        return self._supports[key][1]

    def _table_lin(self, j: int | None, W, x, b) -> list:
        """W x + b for values of at most one token j, by `Fixed.lin` on the tables."""
        S, n = self.S, self.S.rows(j)
        ctx = self.fx.context((n,))
        Y = self.fx.lin(W, S.stack(x, n), b, ctx, "lin")  # a zero-width input: the map is its bias
        S.note_table(j, ctx)
        return S.lookups(j, Y)

    def dot(self, a, b, bias=None, out: str = "storage"):
        """sum_j a_j b_j + bias; `out` says where a float format rounds it (`SymFloat.dot`)."""
        S, fx = self.S, self.fx
        # R(0 * x) = 0 in every rounding mode and never saturates: drop products with a constant 0
        # (in a float format a zero partial sum term leaves the sum's value as it is)
        pairs = [(x, y) for x, y in zip(a, b)
                 if not ((x.is_const and x.value() == 0) or (y.is_const and y.value() == 0))]
        a, b = [x for x, _ in pairs], [y for _, y in pairs]
        if isinstance(S, SymFloat):
            return S.dot(a, b, bias, out)
        if fx.accumulate == "product":
            terms = [S.sat(S.rescale(S.mul(x, y))) for x, y in zip(a, b)]
            s = S.total(terms + ([S.const(bias)] if bias is not None else []))
        else:
            # R(step (sum of products) + bias) = R((num sum + den bias) / den)
            prods = [S.mul(x, y) for x, y in zip(a, b)]
            shifted = [S.const(fx.times_den(bias))] if bias is not None else []
            s = S.total(prods + shifted) if fx.num == 1 else S.total([S.scale_num(S.total(prods))] + shifted)
            s = S.round_den(s)
        return S.sat(s)

    def add(self, x, y):
        """sat(x + y): the coordinates whose two sides hold no term and at most one token on tables,
        one numpy pass per token; the others one by one."""
        S = self.S
        out: list = [None] * len(x)
        groups: dict = {}
        for c, (u, v) in enumerate(zip(x, y)):
            if u.is_term or v.is_term or (u.var is not None and v.var is not None and u.var != v.var):
                out[c] = S.add_values([u], [v])[0] if isinstance(S, SymFloat) else S.sat(S.add(u, v))
            else:
                groups.setdefault(u.var if u.var is not None else v.var, []).append(c)
        for j, cols in groups.items():
            n = S.rows(j)
            ctx = self.fx.context((n,))
            Y = self.fx.add(S.stack([x[c] for c in cols], n), S.stack([y[c] for c in cols], n), ctx, "add")
            S.note_table(j, ctx)
            for c, value in zip(cols, S.lookups(j, Y)):
                out[c] = value
        return out



def encode(ev, case: Case, theory: str = "bv", deadline: Deadline | None = None) -> Encoding:
    """The failure formula of one case; raises `TimedOut` if the deadline passes while it is built."""
    return specify(ev, forward(ev, case.domains, theory, deadline), case)


@dataclass
class Forward:
    """The forward pass over a box of inputs of one length: the readout's states and the trace."""

    S: SymFX
    maps: "_Maps"
    X: list
    rec: dict

    def terms(self) -> int:
        """How many of its values are z3 terms (mix tokens): the size of what the solver gets."""
        def count(x) -> int:
            return sum(count(y) for y in x) if isinstance(x, list) else int(x.is_term)
        return sum(count(v) for v in self.rec.values())


def forward(ev, domains, theory: str = "bv", deadline: Deadline | None = None) -> Forward:
    """The symbolic forward pass over the product of `domains` (one per position)."""
    if isinstance(ev.arith, FloatArith):  # z3's floating-point theory; integers stay bit-vectors
        S: SymFX = SymFloat(ev.arith, domains, bit_width(ev))
    else:
        S = SymFX(ev.arith, domains, bit_width(ev), theory)
    maps = _Maps(S, deadline)
    use = ev.saturated_use
    if maps.track and use is not None:  # a saturated parameter fails the answers that use it
        P_mask = getattr(ev.q, "P_mask", None)
        S.note(S.const(bool(use.always)))
        for j, dom in enumerate(S.domains):
            S.scope = ("k", 0, j)
            S.note(S.lookup(j, use.at(j, dom, P_mask)))
    if isinstance(ev, RecurrentEvaluator):
        X, rec = _recurrent(ev, S, maps)
    else:
        X, rec = _transformer(ev, S, maps, len(S.domains), deadline)
    return Forward(S, maps, X, rec)


class Encoder:
    """Each case's encoding, sharing one forward pass among the cases of a length where that costs
    the solver nothing (docs/smt-encoding.md, "Shared encodings and cases in parallel").

    The cases of one length usually differ only in a few fixed positions (MQAR's query).  The
    forward pass over the union of their boxes is built once; a case is then its readout and
    specification on it, with "the tokens are in the case's box" as one more conjunct.  Partial
    evaluation on a fixed token can matter more than the building: the union's pass is used only
    when it has at most SHARE_TERMS times the z3 terms of the group's first case's own (measured:
    MQAR, N = 8, +0.7% terms, 1.24x faster shared; composition, depth 2, +35% terms, 18x slower
    shared).  The choice depends on the group alone, so a case's formula is the same whichever
    process builds it, after whichever other cases."""

    SHARE_TERMS = 1.1

    def __init__(self, ev, theory: str = "bv", deadline: Deadline | None = None):
        self.ev, self.theory, self.deadline = ev, theory, deadline
        self.group: list[Case] | None = None  # the last group asked for (kept: its id stays its own)
        self.union: Forward | None = None  # its shared forward pass, or None
        self.first: Forward | None = None  # its first case's own pass, built for the choice and used once

    def __call__(self, case: Case, group: list[Case]) -> Encoding:
        """The encoding of `case`, one of `group` (cases of its length, in enumeration order)."""
        if group is not self.group:
            self.group, self.first, self.union = group, None, None
            if len(group) > 1:
                self._choose(group)
        if self.union is not None:
            return specify(self.ev, self.union, case)
        if case is group[0] and self.first is not None:
            fwd, self.first = self.first, None
        else:
            fwd = forward(self.ev, case.domains, self.theory, self.deadline)
        return specify(self.ev, fwd, case)

    def _choose(self, group: list[Case]) -> None:
        """Share the union's pass, or not; a float format's exp table that does not fit a pass (the
        first case's or the union's) leaves each case its own."""
        try:
            self.first = forward(self.ev, group[0].domains, self.theory, self.deadline)
            terms = self.first.terms()
            if terms == 0:  # a table decides it: the solver would get more from any union
                return
            union = forward(self.ev, union_box(group), self.theory, self.deadline)
        except TableTooLarge:
            return
        if union.terms() <= self.SHARE_TERMS * terms:
            self.union, self.first = union, None


def union_box(cases: list[Case]) -> list[np.ndarray]:
    """The smallest box that holds the boxes of cases of one length: per position, every token of theirs."""
    return [np.unique(np.concatenate([c.domains[j] for c in cases])) for j in range(cases[0].length)]


def _recurrent(ev: RecurrentEvaluator, S: SymFX, maps: _Maps) -> tuple[list, dict]:
    """The states h_t of a recurrent model, as `RecurrentEvaluator.forward` computes them."""
    q = ev.q
    h, states = [S.const(c) for c in q.h0], []
    for t, dom in enumerate(S.domains):
        S.scope = ("k", 0, t)
        a = maps.lin(q.W, h, q.b)
        h = [S.relu(x) for x in maps.add(a, [S.lookup(t, q.U[dom, c]) for c in range(q.d)])]
        states.append(h)
    return states, {"h": states}


def _transformer(ev: Evaluator, S: SymFX, maps: _Maps, L: int, deadline: Deadline | None) -> tuple[list, dict]:
    """The residual stream at the positions the readout reads, as `Evaluator.forward` computes it."""
    fx, q, t = ev.arith, ev.q, ev.tables
    assert t is not None  # the engines' evaluators, with the layer-0 tables
    V = len(q.vocab)
    rows = [j * V + dom for j, dom in enumerate(S.domains)]
    track = maps.track
    lin, dot, add = maps.lin, maps.dot, maps.add

    rec: dict = {}
    X = None
    every = q.readout.positions == "all"
    for li, layer in enumerate(q.layers):
        final = li == len(q.layers) - 1
        qpos = [L - 1] if final and not every else list(range(L))
        keys = {i: [j for j in range(L) if not layer.causal or j <= i] for i in qpos}
        if li == 0:
            Xq = [S.lookups(i, t.x0[rows[i]]) for i in qpos]
            if track:
                for j in range(L):
                    S.scope = ("k", 0, j)
                    S.note(S.lookup(j, t.kv_ovf[rows[j]]))
                for i in qpos:
                    S.scope = ("q", 0, i)
                    S.note(S.lookup(i, t.q_ovf[rows[i]]))
        else:
            Xq = [X[i] for i in qpos]
        outs = [[] for _ in qpos]
        if li == 0:  # each head's distinct query and key vectors (positions often share them)
            distinct = [(*np.unique(t.q[hi], axis=0, return_inverse=True),
                         *np.unique(t.k[hi], axis=0, return_inverse=True)) for hi in range(len(layer.heads))]
        for hi, head in enumerate(layer.heads):
            if li == 0:
                Vs = [S.lookups(j, t.v[hi][rows[j]]) for j in range(L)]
            else:
                Ks, Vs = [], []
                for j in range(L):
                    S.scope = ("k", li, j)
                    Ks.append(lin(head.W_K, X[j], head.b_K))
                    Vs.append(lin(head.W_V, X[j], head.b_V))
            for n, i in enumerate(qpos):
                S.scope = ("q", li, i)
                if deadline is not None:
                    deadline.check()
                if li == 0:  # every key position at once, then split by position
                    key_rows = np.concatenate([rows[j] for j in keys[i]])
                    table, ovf = _logits(fx, *distinct[hi], rows[i], key_rows)
                    bounds = np.cumsum([0] + [len(rows[j]) for j in keys[i]])
                    logits = S.pairs(i, keys[i], table, bounds)
                    if track:
                        for j, a, b in zip(keys[i], bounds, bounds[1:]):
                            S.note(S.pair(i, j, ovf[:, a:b]))
                else:
                    Qi = lin(head.W_Q, Xq[n], head.b_Q)
                    logits = [dot(Qi, Ks[j], out="acc") for j in keys[i]]
                weights = softmax(S, logits) if layer.attention == "softmax" else [S.relu(s) for s in logits]
                outs[n].append([dot(weights, [Vs[j][c] for j in keys[i]], out="mix") for c in range(head.W_V.shape[0])])
                rec.setdefault(f"L{li}.H{hi}.logits", []).append(logits)
                rec.setdefault(f"L{li}.H{hi}.attn", []).append(weights)
                rec.setdefault(f"L{li}.H{hi}.out", []).append(outs[n][-1])
        Xnew = []
        for n in range(len(qpos)):
            S.scope = ("q", li, qpos[n])
            if layer.attention == "softmax":
                heads = [x for out in outs[n] for x in out]
            else:
                H = len(outs[n])
                heads = [S.mean_heads([o[c] for o in outs[n]]) if isinstance(S, SymFloat) else
                         S.sat(S.round_div(S.total([o[c] for o in outs[n]]), S.const(H)))
                         for c in range(len(outs[n][0]))]
            A = lin(layer.W_O, heads, layer.b_O)
            x = add(Xq[n], A) if layer.residual else A
            rec.setdefault(f"L{li}.heads", []).append(heads)
            rec.setdefault(f"L{li}.resid", []).append(x)
            if layer.has_ffn:
                hidden = [S.relu(h) for h in lin(layer.W1, x, layer.b1)]
                F = lin(layer.W2, hidden, layer.b2)
                x = add(x, F) if layer.residual else F
                rec.setdefault(f"L{li}.ffn_hidden", []).append(hidden)
                rec.setdefault(f"L{li}.out", []).append(x)
            Xnew.append(x)
        X = Xnew
    return X, rec


def _logits(fx: Fixed, uq: np.ndarray, q_of: np.ndarray, uk: np.ndarray, k_of: np.ndarray,
            q_rows: np.ndarray, k_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Layer-0 logits (and their saturations) of the table rows q_rows against k_rows, by
    `Fixed.scores` on the distinct vectors only (uq[q_of[r]] is row r's query vector; uk, k_of
    its key vector): the same codes, computed once per distinct pair."""
    qi, qback = np.unique(q_of.reshape(-1)[q_rows], return_inverse=True)
    ki, kback = np.unique(k_of.reshape(-1)[k_rows], return_inverse=True)
    ctx = fx.context((len(qi), len(ki)))
    table = fx.scores(uq[qi], uk[ki], ctx, "logits")
    q_back, k_back = qback.reshape(-1)[:, None], kback.reshape(-1)[None, :]
    return table[q_back, k_back], ctx.ovf[q_back, k_back]


def specify(ev, fwd: Forward, case: Case) -> Encoding:
    """The failure formula of a case from a forward pass over a box that holds the case's: from the
    states the readout reads (one per position, the last one last).  A larger box's pass (an
    `Encoder`'s) gets "the tokens are in the case's box" as a conjunct, and keeps its own
    saturation notes: a case's are dropped once its formula holds them."""
    q, S, maps, X, rec = ev.q, fwd.S, fwd.maps, fwd.X, fwd.rec
    noted = len(S.overflows)
    truth = case.truth(S)
    every = q.readout.positions == "all"
    ys = []
    for r, x in enumerate(X[read_from(q):] if every else X[-1:]):
        S.scope = ("out", None, r)
        ys.append(maps.lin(q.readout.W_U, x, q.readout.b_U))
    # per answer: the saturations it depends on (under overflow = error)
    cone = Cone(q, case.length)
    feeding: list[list[Sym]] = [[] for _ in ys]
    for o, scope in zip(S.overflows, S.scopes):
        for r in np.flatnonzero(cone.feeds(scope)):
            feeding[r].append(o)
    fails = [S.any([_wrong(S, q.readout, yr, tr)] + feeding[r])
             for r, (yr, tr) in enumerate(zip(ys, truth if every else [truth]))]
    if every:  # a failure at any position with an answer
        y = ys
        fail = S.any([S.and_(S.ne(tr, S.const(NO_ANSWER)), f) for tr, f in zip(truth, fails)])
    else:
        y, fail = ys[0], fails[0]
    valid = case.valid(S) if case.valid is not None else None
    if valid is not None:
        fail = S.and_(valid, fail)
    narrower = [S.member(j, d) for j, d in enumerate(case.domains) if len(d) < len(S.domains[j])]
    if narrower:
        # SMT-LIB's `and` takes two arguments or more (the --smtlib text and the other solvers)
        fail = S.and_(Sym(expr=narrower[0] if len(narrower) == 1 else z3.And(narrower)), fail)
    del S.overflows[noted:], S.scopes[noted:]
    return Encoding(case, S, fail, y, truth, rec, q.readout, valid, shared=bool(narrower))


def _wrong(S: SymFX, readout, y: list[Sym], truth: Sym) -> Sym:
    """The readout codes y do not give the answer: not the strict argmax (a tie fails), or a
    threshold bit that differs."""
    if readout.kind == "argmax":
        best = S.select(y, truth)
        return S.any([S.and_(S.ne(truth, S.const(c)), S.ge(y[c], best)) for c in range(len(y))])
    above = [S.above(yi, readout.theta) if isinstance(S, SymFloat) else
             S.gt(yi, S.const(threshold_code(readout.theta, S.fx))) for yi in y]
    return S.any([S.ne(up, S.lift1(truth, lambda a, i=i: (a >> i) & 1 == 1, lambda e, i=i: _bit(e, i)))
                  for i, up in enumerate(above)])


def _bit(e, i: int):
    """Bit i of a z3 integer term is 1."""
    return z3.Extract(i, i, e) == 1 if z3.is_bv(e) else (e / (1 << i)) % 2 == 1


def softmax(S: SymFX, s: list[Sym]) -> list[Sym]:
    """docs/arithmetic.md softmax: d = sat(s - M), e = R(exp d), Z exact, a = R(e / Z)."""
    fx = S.fx
    tokens = {x.var for x in s if x.var is not None}
    if len(tokens) <= 1 and not any(x.is_term for x in s):  # on tables, by the evaluator's softmax
        j = tokens.pop() if tokens else None
        ctx = fx.context((S.rows(j),))
        a = fx.softmax(S.stack(s, S.rows(j)), None, ctx, "softmax")
        S.note_table(j, ctx)
        return S.lookups(j, a)
    if isinstance(S, SymFloat):
        return S.softmax(s)
    M = s[0]
    for x in s[1:]:
        M = S.maximum(M, x)
    d = [S.sat(S.sub(x, M)) for x in s]  # only the lower bound can bite: s - M <= 0
    e = [S.exp(x) for x in d]
    if fx.overflow == "error" and fx.exp0_saturates:
        for x in d:  # exp(0) = 1 is not representable
            S.note(S.lift1(x, lambda a: a == 0, lambda z: z == 0))
    Z = S.total(e)
    return [S.sat(S.round_div(S.times_den(x), S.scale_num(Z))) for x in e]
