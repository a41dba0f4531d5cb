"""The evaluator: a batched forward pass of a `Model` in one arithmetic (a fixed-point format or real).

One pass, written once against the arithmetic interface of `verifier.arithmetic`:

* **fast path** (``tables=True``, used by the engines).  A layer-0 input depends only on
  (token, position), so layer 0's embeddings, Q, K, V, and, when small enough, every logit
  <q, k> are computed once for all (position, token) pairs and then gathered; the logits over
  each head's distinct query and key rows (a head that reads positions only has one per
  position, whatever the vocabulary).  This is exact partial evaluation, not an approximation:
  the gathered codes are the codes the generic path computes.  Saturation flags are gathered
  along with them.
* **generic path** (``tables=False``): every intermediate computed from the batch; with a
  recorder it keeps every intermediate of the input (``trace``).  Counterexamples are replayed
  on this path, so the fast path is cross-checked on every reported failure.

A readout at the last position only (the default) lets the last layer compute its query, FFN and
readout at the last position only; keys and values are still computed at every position.
A readout at every position (``Readout.positions = "all"``) computes them everywhere, and answers
are then (B, L): an input fails when any position with an answer does (`judge`; a task may
require none at some positions, `NO_ANSWER`); after a BOS token (``Model.bos``) the BOS position
itself is not read, so answers are (B, L - 1).  Under ``overflow = error`` a saturation fails only
the answers that depend on it (`Cone`): one at the BOS position of the last layer, or at a position
with no answer required, fails nothing.

Linear maps skip the columns that are zero after quantization: R(0 * x) = 0 in every rounding
mode, so skipping them is exact.  A map whose rows are mostly zero (one that writes a few slots of
a wide stream) computes its other rows alone, and a zero row as the arithmetic's sum of no
products plus the bias.  A map whose rows each have few non-zeros (the identity blocks of
the constructions) is applied row by row on its own columns, for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .arithmetic import Arithmetic, Ctx, Real, Recorder
from .model import Model, Recurrent
from .support.budget import TooLarge, fmt_bytes, require_memory
from .support.errors import InputError
from .tasks.base import NO_ANSWER
from .verdicts import Reason

_LOGIT_TABLE_LIMIT = 1 << 30  # distinct (query row, key row) pairs x m products for the layer-0 logit table
_LOGIT_TABLE_PAIRS = 1 << 24  # and its distinct pairs: 128 MiB of codes
_TABLE_CHUNK = 1 << 22  # elements of a table's temporaries (products), computed a chunk of rows at a time


@dataclass
class Outputs:
    """What a batch evaluates to: readout scores, the answer, and the failure flags.  A readout at
    every position adds a position axis after the batch axis to scores, pred and tie."""

    scores: np.ndarray  # (B, C) in the arithmetic's representation
    pred: np.ndarray  # (B,) int64: class (argmax) or bit pattern (threshold)
    tie: np.ndarray  # (B,) bool: argmax had no strict maximum
    ovf: np.ndarray  # (B,) bool: a saturation that an answer read depends on, under overflow = error
    where: list[str] = field(default_factory=list)  # saturation locations (trace mode)
    ovf_at: Optional[np.ndarray] = None  # (B, positions read): per answer, a saturation it depends on
    feeds: list[np.ndarray] = field(default_factory=list)  # per `where` entry: the answers it feeds
    saturated_at: list[str] = field(default_factory=list)  # every saturation's location, either rule (trace)


@dataclass
class Judged:
    """Per input of a batch: does it fail, and where.  For a readout at every position, the first
    failing position (-1 when only a saturation fails it), and the answers at that position (the
    last one when none is wrong)."""

    failed: np.ndarray  # (B,) bool
    position: np.ndarray  # (B,) int64; -1: no position (last-position readout, or overflow only)
    expected: np.ndarray  # (B,) the expected answer (at `position`)
    produced: np.ndarray  # (B,)
    reason: list[Optional[Reason]]  # None: correct
    margin: np.ndarray  # (B,) the smallest margin over the positions read


@dataclass
class SaturatedUse:
    """Which inputs use a parameter that saturated when the model was quantized (docs/arithmetic.md:
    under overflow = error such a parameter fails the inputs that use it, and only those).

    An input uses the embedding row of each token it holds, the position row of each position it
    has where the token takes a position, and every other weight of the model."""

    token: np.ndarray  # (V,) bool: a saturated entry in E[t] (a recurrent model's R.U[t])
    position: np.ndarray  # (L_max,) bool: a saturated entry in P[i]
    always: list[str] = field(default_factory=list)  # saturated entries of the other weights
    row_names: dict[tuple[str, int], str] = field(default_factory=dict)  # ("token", t) / ("position", i) -> an entry

    def note(self, name: str, saturated: np.ndarray) -> None:
        if name in ("E", "R.U", "P"):
            rows = saturated.any(axis=1)
            kind = "position" if name == "P" else "token"
            getattr(self, kind)[:] |= rows
            for r in np.flatnonzero(rows):
                self.row_names[kind, int(r)] = _entry(name, (r, np.flatnonzero(saturated[r])[0]))
        else:
            self.always.append(_entry(name, np.argwhere(saturated)[0]))

    def at(self, position, tokens: np.ndarray, P_mask: np.ndarray) -> np.ndarray:
        """Per token of `tokens` at `position` (an index, or one per last axis of `tokens`): does it
        use a saturated embedding or position row?  (A model without position rows: embeddings only.)"""
        if not len(self.position):
            return self.token[tokens]
        return self.token[tokens] | (self.position[position] & P_mask[tokens])

    def used(self, tokens: np.ndarray, P_mask: np.ndarray) -> list[tuple[str, int]]:
        """The saturated embedding and position rows one input (L,) uses, with the position that uses
        each (the other weights, `always`, every input uses)."""
        return [(self.row_names[key], i) for i, t in enumerate(tokens) for key in (("token", int(t)), ("position", i))
                if key in self.row_names and (key[0] == "token" or P_mask[t])]


class Cone:
    """Which answers each intermediate value feeds: under overflow = error a saturation fails the
    answers that depend on it, and only those (docs/arithmetic.md).  The answers are read at the
    last position, or at every position (after BOS).

    A scope says where a value is computed: ``("k", l, j)`` the keys and values of layer l at
    position j (layer 0: with the embedding at j, which its query reads too; a recurrent model: its
    step j); ``("q", l, i)`` the rest of layer l at query position i (query, logits, softmax,
    heads, FFN); ``("out", None, r)`` the readout of the r-th answer; None a weight every answer
    uses.  Position i of the last layer feeds its own answer; a key at j, every query that
    attends to it (j <= i under a causal mask, every position otherwise); an earlier layer, what
    the next one reads from it."""

    def __init__(self, model: Model | Recurrent, L: int):
        every = model.readout.positions == "all"
        self.reads = np.arange(read_from(model), L) if every else np.array([L - 1])
        causal = [layer.causal for layer in model.layers] if isinstance(model, Model) else [True]
        self.modes: dict[tuple[str, Optional[int]], str] = {}
        for li, c in enumerate(causal):
            q = "exact" if li == len(causal) - 1 else "prefix" if all(causal[li + 1:]) else "all"
            self.modes["q", li] = q
            self.modes["k", li] = "prefix" if c and q != "all" else "all"

    def matrix(self, side: Optional[str], layer: Optional[int], positions) -> np.ndarray:
        """(positions, answers) bool: does the value computed at each position feed each answer?"""
        P = len(self.reads)
        positions = np.asarray(positions, dtype=np.int64).reshape(-1)
        if side is None:
            return np.ones((max(len(positions), 1), P), dtype=bool)
        if side == "out":
            return np.eye(P, dtype=bool)[positions]
        mode = self.modes[side, layer]
        if mode == "all":
            return np.ones((len(positions), P), dtype=bool)
        return positions[:, None] == self.reads if mode == "exact" else positions[:, None] <= self.reads

    def feeds(self, scope: Optional[tuple]) -> np.ndarray:
        """(answers,) bool: the answers a value computed in `scope` feeds."""
        return self.matrix(None, None, [0])[0] if scope is None else self.matrix(scope[0], scope[1], [scope[2]])[0]


class _Saturations:
    """The saturations of one forward pass, by the answers they feed (`Cone`)."""

    def __init__(self, cone: Cone, base: Ctx):
        self.cone, self.base = cone, base  # base: what every answer depends on
        self.ovf = np.zeros((len(base.ovf), len(cone.reads)), dtype=bool)
        self.where: list[str] = []
        self.feeds: list[np.ndarray] = []
        self.saturated_at: list[str] = list(base.saturated_at)

    def add(self, ctx: Ctx, side: str, layer: Optional[int], positions) -> None:
        """Fold in a context over (inputs, len(positions)) (or (inputs,) for one position)."""
        self.saturated_at += ctx.saturated_at
        if not ctx.track:
            return
        M = self.cone.matrix(side, layer, positions)
        flags = ctx.ovf.reshape(len(ctx.ovf), -1)
        if flags.any():
            self.ovf |= (flags.astype(np.float32) @ M.astype(np.float32)) > 0
        for text, i in zip(ctx.where, ctx.at):
            self.where.append(text)
            self.feeds.append(M[0 if i is None else i])

    def outputs(self, y: np.ndarray, pred: np.ndarray, tie: np.ndarray, every: bool) -> Outputs:
        base = self.base
        ovf_at = self.ovf | base.ovf[:, None]
        everything = np.ones(ovf_at.shape[1], dtype=bool)
        return Outputs(y, pred, tie, ovf_at.any(axis=1), base.where + self.where, ovf_at if every else None,
                       [everything] * len(base.where) + self.feeds, self.saturated_at)


def _entry(name: str, index) -> str:
    return f"{name}[{','.join(str(int(i)) for i in index)}]"


@dataclass
class _LogitTable:
    """One layer-0 head's logits over its distinct query rows and distinct key rows (a positional
    head has a few per position, whatever the vocabulary)."""

    values: np.ndarray  # (distinct q rows, distinct k rows) codes
    ovf: np.ndarray  # (distinct q rows, distinct k rows) the logit saturated
    q_row: np.ndarray  # (R,) a (position, token) row's distinct query: the table's row
    k_row: np.ndarray  # (R,) its distinct key: the table's column

    def pairs(self, qrows: np.ndarray, krows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The table's entries of (..., Lq) query rows against (..., Lk) key rows (an index)."""
        return self.q_row[qrows][..., :, None], self.k_row[krows][..., None, :]


@dataclass
class _Layer0Tables:
    x0: np.ndarray  # (R, d), rows r = pos * V + tok
    q: list[np.ndarray]  # per head (R, m)
    k: list[np.ndarray]
    v: list[np.ndarray]
    logits: Optional[list[_LogitTable]]  # per head, or None when too large
    q_ovf: np.ndarray  # (R,) saturation while computing a query row
    kv_ovf: np.ndarray  # (R,) saturation while computing an embedding, key or value row


def logit_table_fits(pairs: int, m: int) -> bool:
    """Is the layer-0 logit table of `pairs` (query row, key row) pairs of width m built?"""
    return pairs <= _LOGIT_TABLE_PAIRS and pairs * max(m, 1) <= _LOGIT_TABLE_LIMIT


class _Reader:
    """What every evaluator shares: the quantized model, and reading its answers."""

    def _quantize(self, model, arith: Arithmetic, positions: int) -> None:
        """Set `q`, the quantized model; note the saturated parameters and the quantization error."""
        self.model = model
        self.arith = arith
        arith.check_model(model)
        self.saturated_params: list[str] = []
        self.quant_error = 0.0
        use = SaturatedUse(np.zeros(len(model.vocab), bool), np.zeros(positions, bool))

        def quantize(name: str, w: np.ndarray) -> np.ndarray:
            codes, sat = arith.quantize(w, name)
            if sat.any():
                self.saturated_params.append(_entry(name, np.argwhere(sat)[0]))
                use.note(name, sat)
            err = np.abs(np.asarray(w, dtype=np.float64) - arith.to_real(codes))
            self.quant_error = max(self.quant_error, float(err.max(initial=0.0)))
            return codes

        require_memory(2 * 8 * model.n_params(), "the quantized model")
        self.q = model.map_arrays(quantize)
        tracked = not isinstance(arith, Real) and arith.overflow == "error" and bool(self.saturated_params)
        self.saturated_use = use if tracked else None

    def _start(self, tokens: np.ndarray, locate: bool, P_mask: np.ndarray) -> tuple[np.ndarray, "_Saturations"]:
        """The batch as int64, and its saturations so far: the saturated parameters it uses (the
        embedding and position rows at the positions that hold them)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        sats = _Saturations(Cone(self.q, tokens.shape[1]), self.arith.context((len(tokens),), locate=locate))
        use = self.saturated_use
        if use is not None:
            rows = self.arith.context(tokens.shape, locate=locate)
            sats.base.ovf |= bool(use.always)
            rows.ovf |= use.at(np.arange(tokens.shape[1]), tokens, P_mask)
            if locate:
                sats.base.where.extend(f"parameter {s}" for s in use.always)
                sats.base.at.extend([None] * len(use.always))
                for name, i in use.used(tokens[0], P_mask):
                    rows.where.append(f"parameter {name}")
                    rows.at.append(i)
            sats.add(rows, "k", 0, np.arange(tokens.shape[1]))  # what the embedding at each position reads
        return tokens, sats

    def _decide(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ro = self.q.readout
        if ro.kind == "argmax":
            top = y.max(axis=-1)
            return y.argmax(axis=-1).astype(np.int64), (y == top[..., None]).sum(axis=-1) > 1
        bits = self.arith.above(y, ro.theta)
        return (bits.astype(np.int64) << np.arange(y.shape[-1])).sum(axis=-1), np.zeros(y.shape[:-1], dtype=bool)

    def margins(self, out: Outputs, expected: np.ndarray) -> np.ndarray:
        """How far each decision is from flipping, in real units (see `readout_margins`); the
        smallest over the positions judged (a position with `NO_ANSWER` has none)."""
        ro = self.q.readout
        y = self.arith.to_real(out.scores)
        expected = np.asarray(expected)
        flat = readout_margins(y.reshape(-1, y.shape[-1]), expected.reshape(-1), ro.kind, float(ro.theta))
        if expected.ndim < 2:
            return flat
        return np.where(expected != NO_ANSWER, flat.reshape(expected.shape), np.inf).min(axis=1)

    def judge(self, out: Outputs, expected: np.ndarray) -> Judged:
        """Each input's verdict, and for a failure the position and answers to report.  A position
        whose expected answer is `NO_ANSWER` is not judged, and a saturation that feeds only such
        positions fails nothing."""
        expected = np.asarray(expected)
        wrong = (out.pred != expected) | out.tie
        B = len(expected)
        ovf = out.ovf
        if wrong.ndim == 2:
            judged = expected != NO_ANSWER
            wrong &= judged
            any_wrong = wrong.any(axis=1)
            position = np.where(any_wrong, wrong.argmax(axis=1), -1)
            last = wrong.shape[1] - 1 - judged[:, ::-1].argmax(axis=1)  # the last position judged
            at = np.where(any_wrong, position, last)
            rows = np.arange(B)
            exp, pred, tie = expected[rows, at], out.pred[rows, at], out.tie[rows, at]
            if out.ovf_at is not None:
                ovf = (out.ovf_at & judged).any(axis=1)
        else:
            position, exp, pred, tie, any_wrong = np.full(B, -1), expected, out.pred, out.tie, wrong
        reason = [Reason.OVERFLOW if o else Reason.TIE if t else Reason.WRONG if w else None
                  for o, t, w in zip(ovf, tie, any_wrong)]
        return Judged(any_wrong | ovf, position.astype(np.int64), exp, pred, reason,
                      self.margins(out, expected))


class Evaluator(_Reader):
    """Quantizes a model once into an arithmetic and evaluates batches of token sequences."""

    def __init__(self, model: Model, arith: Arithmetic, tables: bool = True, table_cap: Optional[float] = None):
        self._quantize(model, arith, model.max_len)
        self._cols: dict[int, tuple[np.ndarray, np.ndarray, bool]] = {}
        self._rows: dict[int, Optional[np.ndarray]] = {}
        if tables:
            self._require_tables(table_cap)
        self.tables = self._build_tables() if tables else None

    def batch_size(self, L: int) -> int:
        """Inputs per batch of length L so that the largest int64 temporary stays near 2^22 elements."""
        model = self.q
        cost = 0
        every = model.readout.positions == "all"
        for li, layer in enumerate(model.layers):
            Lq = 1 if li == len(model.layers) - 1 and not every else L
            H = len(layer.heads)
            m, mv = layer.heads[0].W_Q.shape[0], layer.heads[0].W_V.shape[0]
            if li == 0 and self.tables is not None:
                cost = max(cost, Lq * L * mv * H, 0 if self.tables.logits is not None else Lq * L * m)
            else:
                cost = max(cost, Lq * L * m, L * m * model.d, L * mv * model.d, Lq * L * mv)
            cost = max(cost, Lq * model.d * layer.W_O.shape[1])
            if layer.has_ffn:
                cost = max(cost, Lq * layer.W1.size)
        return _batch(cost)

    # -- helpers ------------------------------------------------------------------------------
    def _plan(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """How `_lin` applies W's rows that have a non-zero (`_live`): (the weights it multiplies,
        the input columns they read, gathered).

        Zero columns are skipped; a matrix whose rows have few non-zeros (identity blocks) is
        gathered row by row, so each row reads only its own columns."""
        key = id(W)
        if key not in self._cols:
            live = self._live(W)
            Wl = W if live is None else W[live]
            cols = np.flatnonzero(np.any(Wl != 0, axis=0))
            nnz = (Wl != 0).sum(axis=1)
            width = max(int(nnz.max(initial=0)), 1)
            if width * 2 <= len(cols):
                idx = np.zeros((Wl.shape[0], width), dtype=np.int64)
                for r in range(Wl.shape[0]):
                    nz = np.flatnonzero(Wl[r])
                    idx[r, :len(nz)] = nz
                self._cols[key] = (np.take_along_axis(Wl, idx, axis=1) * (np.arange(width) < nnz[:, None]), idx, True)
            else:
                self._cols[key] = (Wl[:, cols], cols, False)
        return self._cols[key]

    def _live(self, W: np.ndarray) -> Optional[np.ndarray]:
        """The rows of W with a non-zero, when at most half of them have one (a map that writes a few
        slots of a wide residual stream) and the arithmetic computes rows apart; None: every row
        is computed."""
        key = id(W)
        if key not in self._rows:
            live = np.flatnonzero(np.any(W != 0, axis=1))
            self._rows[key] = live if self.arith.rows_apart and 2 * len(live) <= W.shape[0] else None
        return self._rows[key]

    def _require_tables(self, cap: Optional[float]) -> None:
        """The layer-0 tables hold, per (position, token) row, the embedding and each head's q, k, v,
        and at most _LOGIT_TABLE_PAIRS logits per head; the temporaries (products) are computed a
        chunk of rows at a time (`_by_rows`).  TooLarge beyond this machine's memory, or beyond
        `cap` bytes."""
        q = self.q
        R = len(q.vocab) * q.max_len
        heads = q.layers[0].heads
        per_row = q.d + sum(2 * h.W_Q.shape[0] + h.W_V.shape[0] for h in heads)
        logits = len(heads) * min(R * R, _LOGIT_TABLE_PAIRS)
        nbytes = 8.0 * (R * per_row + logits + 3 * _TABLE_CHUNK)
        what = f"the layer-0 tables ({R:,} (position, token) rows)"
        if cap is not None and nbytes > cap:
            raise TooLarge(f"{what} need about {fmt_bytes(nbytes)}, more than the {fmt_bytes(cap)} allowed here")
        require_memory(nbytes, what)

    def _lin(self, W: np.ndarray, x: np.ndarray, b, ctx: Ctx, name: str) -> np.ndarray:
        Wc, cols, gathered = self._plan(W)
        live = self._live(W)
        bl = b if b is None or live is None else b[live]
        y = self.arith.lin_gathered(Wc, x[..., cols], bl, ctx, name) if gathered else \
            self.arith.lin(Wc, x[..., cols], bl, ctx, name)
        if live is None:
            return y
        # the zero rows: the arithmetic's own sum of no products, plus the bias
        dead = np.setdiff1d(np.arange(W.shape[0]), live)
        zero = self.arith.lin(Wc[:0].reshape(len(dead), 0), x[..., :0], None if b is None else b[dead], ctx, name)
        out = np.empty(y.shape[:-1] + (W.shape[0],), dtype=np.result_type(y, zero))
        out[..., live], out[..., dead] = y, zero
        return out

    def _embed(self, tok: np.ndarray, pos: np.ndarray, ctx: Ctx) -> np.ndarray:
        q = self.q
        add = np.where(q.P_mask[tok][..., None], q.P[pos], 0)
        return self.arith.add(q.E[tok], add, ctx, "embed")

    def _build_tables(self) -> _Layer0Tables:
        """Layer 0 at every (position, token) row; the logits over each head's distinct query and
        key rows (a positional head has a few per position, whatever the vocabulary), when
        `logit_table_fits`."""
        q = self.q
        V, L = len(q.vocab), q.max_len
        R = V * L
        tok = np.tile(np.arange(V), L)
        pos = np.repeat(np.arange(L), V)
        layer = q.layers[0]
        x0, kv_ovf = self._by_rows(R, q.d, lambda r, ctx: self._embed(tok[r], pos[r], ctx))
        q_ovf = kv_ovf.copy()  # a query row is built from the row's embedding too

        def maps(W, b, name: str, ovf: np.ndarray) -> np.ndarray:
            y, hit = self._by_rows(R, self._plan(W)[0].size, lambda r, ctx: self._lin(W, x0[r], b, ctx, name))
            ovf |= hit
            return y

        qs = [maps(h.W_Q, h.b_Q, f"L0.H{i}.q", q_ovf) for i, h in enumerate(layer.heads)]
        ks = [maps(h.W_K, h.b_K, f"L0.H{i}.k", kv_ovf) for i, h in enumerate(layer.heads)]
        vs = [maps(h.W_V, h.b_V, f"L0.H{i}.v", kv_ovf) for i, h in enumerate(layer.heads)]
        distinct = [(np.unique(qh, axis=0, return_inverse=True), np.unique(kh, axis=0, return_inverse=True))
                    for qh, kh in zip(qs, ks)]
        logits = None
        if all(logit_table_fits(len(uq) * len(uk), uq.shape[1]) for (uq, _), (uk, _) in distinct):
            logits = [self._logit_table(uq, q_row, uk, k_row, f"L0.H{i}.logits")
                      for i, ((uq, q_row), (uk, k_row)) in enumerate(distinct)]
        return _Layer0Tables(x0, qs, ks, vs, logits, q_ovf, kv_ovf)

    def _logit_table(self, uq: np.ndarray, q_row: np.ndarray, uk: np.ndarray, k_row: np.ndarray,
                     name: str) -> _LogitTable:
        """<q, k> for every distinct query row uq against every distinct key row uk."""
        S, hit = self._by_rows(len(uq), len(uk) * uq.shape[1],
                               lambda r, ctx: self.arith.scores(uq[r], uk, ctx, name), len(uk))
        return _LogitTable(S, hit, q_row.reshape(-1), k_row.reshape(-1))

    def _by_rows(self, n: int, per_row: int, fn, cols: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
        """fn(rows, ctx) over rows 0..n a chunk at a time, its temporaries (per_row elements a row)
        near _TABLE_CHUNK: the results and their saturations, per row or, with `cols`, per
        (row, column) (a logit's saturation is its own pair's)."""
        step = max(1, _TABLE_CHUNK // max(per_row, 1))
        outs, hits = [], []
        for a in range(0, n, step):
            r = slice(a, min(n, a + step))
            ctx = self.arith.context((r.stop - a,) if cols is None else (r.stop - a, cols))
            outs.append(fn(r, ctx))
            hits.append(ctx.ovf)
        return np.concatenate(outs), np.concatenate(hits)

    # -- the forward pass ---------------------------------------------------------------------
    def forward(self, tokens: np.ndarray, rec: Recorder = None, locate: bool = False,
                first: Optional[np.ndarray] = None) -> Outputs:
        """Evaluate a batch (B, L) of token ids, all of one length L <= max_len.  `first`, when
        given, is the first layer's output (B, L, d) on these tokens, and the later layers run on it
        (the first layer's saturations are then not counted: for overflow = saturate)."""
        q, arith = self.q, self.arith
        tokens, sats = self._start(tokens, locate, q.P_mask)
        B, L = tokens.shape
        positions = np.arange(L)
        every = q.readout.positions == "all"
        X = first  # residual stream at every position that later layers read
        for li, layer in enumerate(q.layers):
            if li == 0 and first is not None:
                continue
            final = li == len(q.layers) - 1
            qpos = positions[-1:] if final and not every else positions
            mask = (qpos[:, None] >= positions[None, :]) if layer.causal else None
            # saturations by where they happen: keys and values (and layer 0's embedding) at each
            # position, and the rest at each query position (`Cone` says which answers they feed)
            kctx, qctx = arith.context((B, L), locate), arith.context((B, len(qpos)), locate)
            t = self.tables if li == 0 else None  # layer 0 reads its tables, when built
            if t is not None:
                rows = positions * len(q.vocab) + tokens
                qrows = rows[:, qpos]
                if kctx.track:
                    kctx.ovf |= t.kv_ovf[rows]
                    qctx.ovf |= t.q_ovf[qrows]
                Xq = t.x0[qrows]
            else:
                if X is None:
                    X = self._embed(tokens, np.broadcast_to(positions, tokens.shape), kctx)
                    if rec:
                        rec("embed", X)
                Xq = X[:, qpos]
            outs = []
            for hi, head in enumerate(layer.heads):
                name = f"L{li}.H{hi}"
                if t is not None:
                    Vh = t.v[hi][rows]
                    if t.logits is not None:
                        table = t.logits[hi]
                        pair = table.pairs(qrows, rows)
                        S = table.values[pair]
                        if qctx.track:
                            hit = table.ovf[pair]
                            qctx.ovf |= (hit if mask is None else hit & mask).any(2)
                    else:
                        S = arith.scores(t.q[hi][qrows], t.k[hi][rows], qctx, f"{name}.logits", mask)
                    outs.append(self._attend(layer, name, S, Vh, mask, qctx, rec))
                else:
                    outs.append(self._head(layer, head, name, X, Xq, mask, kctx, qctx, rec))
            Xq = self.finish_layer(li, Xq, outs, qctx, rec)
            sats.add(kctx, "k", li, positions)
            sats.add(qctx, "q", li, qpos)
            X = Xq
        answers = len(sats.cone.reads)
        octx = arith.context((B, answers) if every else (B,), locate)
        y = self.scores(X[:, read_from(q):] if every else X[:, -1], octx, rec)
        sats.add(octx, "out", None, np.arange(answers))
        pred, tie = self._decide(y)
        return sats.outputs(y, pred, tie, every)

    def _head(self, layer, head, name: str, X: np.ndarray, Xq: np.ndarray, mask: Optional[np.ndarray],
              kctx: Ctx, qctx: Ctx, rec: Recorder = None) -> np.ndarray:
        """One head on the generic path: queries from Xq, keys and values from X (B, L, d)."""
        arith = self.arith
        Qh = self._lin(head.W_Q, Xq, head.b_Q, qctx, f"{name}.q")
        Kh = self._lin(head.W_K, X, head.b_K, kctx, f"{name}.k")
        Vh = self._lin(head.W_V, X, head.b_V, kctx, f"{name}.v")
        S = arith.scores(Qh, Kh, qctx, f"{name}.logits", mask)
        if rec:
            rec(f"{name}.q", Qh), rec(f"{name}.k", Kh), rec(f"{name}.v", Vh), rec(f"{name}.logits", S)
        return self._attend(layer, name, S, Vh, mask, qctx, rec)

    def _attend(self, layer, name: str, S: np.ndarray, Vh: np.ndarray, mask: Optional[np.ndarray], qctx: Ctx,
                rec: Recorder = None) -> np.ndarray:
        """A head's output from its logits S and values Vh."""
        arith = self.arith
        if layer.attention == "softmax":
            Wt = arith.softmax(S, mask, qctx, name, rec)
        else:
            Wt = arith.relu(S) if mask is None else np.where(mask, arith.relu(S), 0)
        out = arith.mix(Wt, Vh, qctx, f"{name}.out")
        if rec:
            rec(f"{name}.attn", Wt), rec(f"{name}.out", out)
        return out

    def first_layer(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Layer 0 at every position of a batch (B, L) on the generic path: its output (B, L, d), and
        where it saturated: at each key position (the embedding, keys, values: (B, L)) and at each
        query position (the rest: (B, L)).  The bounds engine's window tables are made of it."""
        q, arith = self.q, self.arith
        tokens = np.asarray(tokens, dtype=np.int64)
        B, L = tokens.shape
        positions = np.arange(L)
        layer = q.layers[0]
        mask = (positions[:, None] >= positions[None, :]) if layer.causal else None
        kctx, qctx = arith.context((B, L)), arith.context((B, L))
        X = self._embed(tokens, np.broadcast_to(positions, tokens.shape), kctx)
        outs = [self._head(layer, head, f"L0.H{hi}", X, X, mask, kctx, qctx) for hi, head in enumerate(layer.heads)]
        return self.finish_layer(0, X, outs, qctx), kctx.ovf, qctx.ovf

    def finish_layer(self, li: int, Xq: np.ndarray, outs: list[np.ndarray], ctx: Ctx,
                     rec: Recorder = None) -> np.ndarray:
        """Layer li after its heads, position by position: the heads' outputs `outs` (per head
        (B, Lq, m_v)) through W_O, the residual from Xq (B, Lq, d) and the FFN."""
        layer, arith = self.q.layers[li], self.arith
        if layer.attention == "softmax":
            heads = np.concatenate(outs, axis=-1)
        else:
            heads = arith.mean_heads(np.stack(outs, axis=-2), ctx, f"L{li}.heads")
        A = self._lin(layer.W_O, heads, layer.b_O, ctx, f"L{li}.attn_out")
        Xq = arith.add(Xq, A, ctx, f"L{li}.resid") if layer.residual else A
        if rec:
            rec(f"L{li}.heads", heads), rec(f"L{li}.attn_out", A), rec(f"L{li}.resid", Xq)
        if layer.has_ffn:
            hidden = arith.relu(self._lin(layer.W1, Xq, layer.b1, ctx, f"L{li}.ffn_hidden"))
            F = self._lin(layer.W2, hidden, layer.b2, ctx, f"L{li}.ffn_out")
            Xq = arith.add(Xq, F, ctx, f"L{li}.out") if layer.residual else F
            if rec:
                rec(f"L{li}.ffn_hidden", hidden), rec(f"L{li}.ffn_out", F), rec(f"L{li}.out", Xq)
        return Xq

    def scores(self, X: np.ndarray, ctx: Ctx, rec: Recorder = None) -> np.ndarray:
        """The readout's scores of the residual stream X (..., d)."""
        y = self._lin(self.q.readout.W_U, X, self.q.readout.b_U, ctx, "readout")
        if rec:
            rec("readout.scores", y)
        return y

class RecurrentEvaluator(_Reader):
    """The forward pass of a `Recurrent` model, one step at a time, vectorised over the batch:
    a = sat(R(W h) + b), then h = ReLU(sat(a + U[x_t])) (docs/arithmetic.md, "Recurrent models")."""

    tables = None  # no layer-0 tables: every step reads the previous state

    def __init__(self, model: Recurrent, arith: Arithmetic, tables: bool = True):
        self._quantize(model, arith, 0)

    def batch_size(self, L: int) -> int:
        q = self.q
        return _batch(max(q.W.size, q.readout.W_U.size * (L if q.readout.positions == "all" else 1)))

    def forward(self, tokens: np.ndarray, rec: Recorder = None, locate: bool = False) -> Outputs:
        q = self.q
        tokens, sats = self._start(tokens, locate, np.zeros(len(q.vocab), bool))
        B, L = tokens.shape
        h = np.broadcast_to(q.h0, (B, q.d))
        pre, states = [], []
        for t in range(L):
            ctx = self.arith.context((B,), locate)  # step t feeds the answers at t and after (`Cone`)
            a, h = self.step(h, tokens[:, t], ctx, f"t{t}")
            sats.add(ctx, "k", 0, [t])
            pre.append(a)
            states.append(h)
        H = np.stack(states, axis=1)
        if rec:
            rec("Wh", np.stack(pre, axis=1)), rec("h", H)
        every = q.readout.positions == "all"
        octx = self.arith.context((B, L) if every else (B,), locate)
        y, pred, tie = self.read(H if every else h, octx)
        sats.add(octx, "out", None, np.arange(len(sats.cone.reads)))
        if rec:
            rec("readout.scores", y)
        return sats.outputs(y, pred, tie, every)

    def step(self, h: np.ndarray, tokens: np.ndarray, ctx: Ctx, name: str) -> tuple[np.ndarray, np.ndarray]:
        """One step from states h (B, d) on tokens (B,): (W h + b, the new states)."""
        q = self.q
        a = self.arith.lin(q.W, h, q.b, ctx, f"{name}.Wh")
        return a, self.arith.relu(self.arith.add(a, q.U[tokens], ctx, f"{name}.pre"))

    def read(self, h: np.ndarray, ctx: Ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The readout of states h (..., d): (scores, answer, tie)."""
        ro = self.q.readout
        y = self.arith.lin(ro.W_U, h, ro.b_U, ctx, "readout")
        return (y, *self._decide(y))


def read_from(model: Model | Recurrent) -> int:
    """The first position a readout at every position reads: 1 after a BOS token (whose own output
    is not an answer), else 0."""
    return 0 if model.bos is None else 1


def _batch(cost: int) -> int:
    return int(min(1 << 16, max(16, (1 << 22) // max(cost, 1))))


def make_evaluator(model: Model | Recurrent, arith: Arithmetic, tables: bool = True) -> Evaluator | RecurrentEvaluator:
    """The evaluator for a model: `tables` (the layer-0 tables of a transformer) for the engines,
    without them for the generic path that replays and traces."""
    if isinstance(model, Recurrent):
        return RecurrentEvaluator(model, arith, tables)
    return Evaluator(model, arith, tables)


def readout_margins(y: np.ndarray, expected: np.ndarray, kind: str, theta: float) -> np.ndarray:
    """Margins of readout scores y (B, C) against the expected answers (negative or 0: failed).

    argmax: score of the expected class minus the best other score; threshold: the smallest
    signed distance y_i - theta over the output bits (sign + where the bit should be 1).
    y and theta in the same units.
    """
    y = np.asarray(y, dtype=np.float64)
    B, C = y.shape
    if kind == "argmax":
        right = y[np.arange(B), expected]
        others = y.copy()
        others[np.arange(B), expected] = -np.inf
        return right - others.max(axis=1) if C > 1 else np.full(B, np.inf)
    want = (expected[:, None] >> np.arange(C)) & 1
    return np.where(want == 1, y - theta, theta - y).min(axis=1)


def trace(ev: Evaluator | RecurrentEvaluator, tokens: np.ndarray) -> tuple[Outputs, dict[str, np.ndarray]]:
    """Every intermediate of one input: {name: array without the batch axis}.

    Use an evaluator built with ``tables=False``, so the values come from the generic path.
    """
    values: dict[str, np.ndarray] = {}

    def rec(name: str, arr: np.ndarray) -> None:
        values[name] = np.asarray(arr)[0]

    out = ev.forward(np.asarray(tokens, dtype=np.int64)[None, :], rec=rec, locate=True)
    return out, values


SAMPLE_TABLES = 1 << 30  # bytes: beyond, tables cost more than the few inputs of a sample they speed up


def fitting_evaluator(model: Model | Recurrent, arith: Arithmetic) -> Evaluator | RecurrentEvaluator:
    """The batched evaluator for a sample of inputs (a proof's sample check, the bounds engine's
    leaves): with its layer-0 tables when they take at most SAMPLE_TABLES bytes, else on the
    generic path (the same codes, computed from the weights for every input)."""
    if isinstance(model, Recurrent):
        return make_evaluator(model, arith)
    try:
        return Evaluator(model, arith, table_cap=SAMPLE_TABLES)
    except InputError:
        return make_evaluator(model, arith, tables=False)


def reference(model: Model | Recurrent) -> Evaluator | RecurrentEvaluator:
    """The float64 reference evaluator of the unquantized model."""
    return make_evaluator(model, Real(), tables=False)
