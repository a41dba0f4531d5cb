"""Random small models of every kind, for differential tests; edited model files; the CLI run in-process."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import cli
from verifier.arithmetic import ACCUMULATES, ROUNDINGS, FixedPoint, Grid
from verifier.engines import Problem
from verifier.model import Head, Layer, Model, Readout
from verifier.tasks.base import Vocabulary


def run(capsys, *args) -> tuple[int, str, str]:
    """``verify ARGS`` in this process (`cli.main`, each argument as a string): the exit code, stdout
    and stderr."""
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


EXTREMES = (1e300, -1e300, 2.0 ** 40, -(2.0 ** 40), 2.0 ** 29, 1e-300, -1e-300, -0.0, 5e-324)


def random_model(rng: np.random.Generator, V: int | list[str], max_len: int, C: int = 2, readout: str | None = None,
                 scale: float = 1.5, dims: Optional[dict] = None, extreme: float = 0.0,
                 edges: tuple = ()) -> Model:
    """1-2 layers, 1-2 heads, softmax or ReLU attention, causal or not, residual or not, FFN or not.

    `dims` fixes any of d, m, mv, h (0 gives degenerate, empty shapes), H (heads per layer) and
    attention ("softmax" or "relu"); with `extreme` > 0 that
    share of the weights (and theta) becomes an extreme constant: huge, tiny, or one of `edges`
    (a format's exact range ends and half steps).  `V` is the vocabulary size, or the task's
    vocabulary (its names)."""
    vocab = list(V) if isinstance(V, list) else [f"t{i}" for i in range(V)]
    V = len(vocab)
    dims = dims or {}
    d = dims.get("d", int(rng.integers(2, 5)))
    m = dims.get("m", int(rng.integers(1, 4)))
    mv = dims.get("mv", int(rng.integers(1, 4)))
    wild = np.array(EXTREMES + tuple(edges))

    def w(*shape):
        # mostly grid-friendly values, sometimes zero, sometimes off-grid
        x = rng.normal(0, scale, size=shape)
        x = np.where(rng.random(shape) < 0.2, 0.0,
                     np.round(x * 8) / 8 + (rng.random(shape) < 0.3) * rng.normal(0, 0.05, size=shape))
        if extreme:
            x = np.where(rng.random(shape) < extreme, rng.choice(wild, size=shape), x)
        return x

    layers = []
    for _ in range(int(rng.integers(1, 3))):
        H = dims.get("H", int(rng.integers(1, 3)))
        attention = dims.get("attention", "softmax" if rng.random() < 0.6 else "relu")
        heads = [Head(w(m, d), w(m, d), w(mv, d)) for _ in range(H)]
        W_O = w(d, mv if attention == "relu" else H * mv)
        ffn = {}
        if rng.random() < 0.6:
            h = dims.get("h", int(rng.integers(1, 4)))
            ffn = dict(W1=w(h, d), b1=w(h), W2=w(d, h), b2=w(d))
        layers.append(Layer(heads, W_O, attention, residual=bool(rng.random() < 0.7),
                            causal=bool(rng.random() < 0.3), **ffn))
    kind = readout or ("argmax" if rng.random() < 0.7 else "threshold")
    theta = float(np.round(rng.normal(0, 0.5) * 4) / 4)
    if extreme and rng.random() < extreme:
        theta = float(rng.choice(wild))
    model = Model(E=w(V, d), P=w(max_len, d), P_mask=rng.random(V) < 0.8, layers=layers,
                  readout=Readout(w(C, d), w(C), kind, theta), vocab=vocab)
    model.validate()
    return model


def two_layer(rng: np.random.Generator, vocab, max_len: int, C: int, readout: str = "argmax", sharp: float = 0.0):
    """A random model of two softmax layers, the first causal; with `sharp` > 0 the first layer's
    logits are a recency ramp, `sharp` per position, plus random token terms in all but its first
    head (the steeper the ramp, the narrower its window)."""
    while True:
        model = random_model(rng, vocab, max_len, C=C, readout=readout, dims={"attention": "softmax"})
        if len(model.layers) == 2:
            break
    model.layers[0].causal = True
    if sharp:
        add_biases(model, rng)
        c = int(rng.integers(0, model.d))
        model.E[:, c], model.P[:, c], model.P_mask[:] = 0.0, np.arange(max_len) / 4, True
        for hi, head in enumerate(model.layers[0].heads):
            if hi == 0:
                head.W_Q[:], head.W_K[:] = 0.0, 0.0
            head.W_Q[0], head.W_K[0], head.b_Q[0], head.b_K[0] = 0.0, 0.0, sharp, 0.0
            head.W_K[0, c] = 4.0
    return model


def query_only(model: Model, rng: np.random.Generator) -> Model:
    """Make a two-layer model's second layer read its first layer at the last position only: its
    keys and values read a random set of columns that the first layer leaves as they are (zero rows
    of W_O, b_O, W2, b2).  The first layer gets a new FFN: two units per other column that read and
    write that column only (as G.2's sigma does: the engine bounds such columns code by code), and
    one unit that reads every column and writes one of them."""
    first, second = model.layers
    first.residual = True
    d = model.d
    kept = np.zeros(d, dtype=bool)  # a proper subset, not empty
    kept[rng.permutation(d)[:int(rng.integers(1, d))]] = True
    free = np.flatnonzero(~kept)
    first.W_O[kept] = 0.0
    if first.b_O is not None:
        first.b_O[kept] = 0.0
    units = [c for c in free for _ in range(2)] + [-1]
    W1, W2 = np.zeros((len(units), d)), np.zeros((d, len(units)))
    for u, c in enumerate(units):
        if c >= 0:
            W1[u, c], W2[c, u] = rng.choice([-2.0, -1.0, 1.0, 2.0]), rng.choice([-1.0, -0.5, 0.5, 1.0])
        else:
            W1[u] = np.round(rng.normal(0, 1, d) * 4) / 4
            if len(free):
                W2[rng.choice(free), u] = 1.0
    first.W1, first.b1, first.W2 = W1, np.round(rng.normal(0, 1, len(units)) * 4) / 4, W2
    first.b2 = np.where(kept, 0.0, np.round(rng.normal(0, 1, d) * 4) / 4)
    for h in second.heads:
        h.W_K[:, ~kept], h.W_V[:, ~kept] = 0.0, 0.0
    return model


def answer_lookup_task(V: int, L: int, classes: int, seed: int) -> "RandomLookupTask":
    """A `RandomLookupTask` that also gives cases fixing the answer's position (`answer_cases`), as
    MQAR and nearest neighbour do: what the bounds engine reads a non-local first layer with."""
    task = RandomLookupTask(V, L, classes, seed)
    task.answer_cases = task.cases  # type: ignore[attr-defined]
    return task


def add_biases(model: Model, rng: np.random.Generator) -> Model:
    """Give every attention layer biases b_Q, b_K, b_V and b_O (model format version 2)."""
    for layer in model.layers:
        for h in layer.heads:
            h.b_Q, h.b_K, h.b_V = (np.round(rng.normal(0, 1, len(W)) * 8) / 8 for W in (h.W_Q, h.W_K, h.W_V))
        layer.b_O = np.round(rng.normal(0, 1, model.d) * 8) / 8
    return model


class RandomLookupTask(Vocabulary):  # the base of every task: its optional capabilities declared absent
    """A test task: every sequence of length L over V tokens; the answer is F[token at `key`].

    With a threshold readout the answer is a bit pattern of `bits` bits."""

    name = "random_lookup"
    per_position = False

    def __init__(self, V: int, L: int, classes: int, seed: int, readout: str = "argmax"):
        from verifier.tasks import Case
        rng = np.random.default_rng(seed)
        self.V, self.L = V, L
        self.vocab = [f"t{i}" for i in range(V)]
        self.max_len = L
        self.readout = readout
        self.num_classes = classes
        self.key = int(rng.integers(0, L))
        self.F = rng.integers(0, classes if readout == "argmax" else 2 ** classes, size=V)
        self._Case = Case

    @property
    def total(self) -> int:
        return self.V ** self.L

    def describe(self) -> dict:
        return {"name": self.name, "N": self.L, "V": self.V}

    def batches(self, start, stop, batch_size):
        size = batch_size if isinstance(batch_size, int) else batch_size(self.L)
        from verifier.tasks import Batch
        weights = self.V ** np.arange(self.L - 1, -1, -1)
        for a in range(start, stop, size):
            idx = np.arange(a, min(a + size, stop))
            tokens = (idx[:, None] // weights[None, :]) % self.V
            yield Batch(tokens, self.F[tokens[:, self.key]], idx)

    def cases(self):
        per = self.V ** (self.L - 1)
        for last in range(self.V):  # the enumeration's last digit varies fastest: cases interleave
            doms = [np.arange(self.V)] * (self.L - 1) + [np.array([last])]
            yield self._Case(f"last={last}", doms, lambda S, F=self.F[doms[self.key]]: S.lookup(self.key, F), 0, per,
                             answer_at=(self.key, self.F))

    def decode(self, index):
        return next(self.batches(index, index + 1, 1)).tokens[0]

    def index_of(self, tokens):
        return int(sum(int(t) * self.V ** (self.L - 1 - i) for i, t in enumerate(tokens)))

    def answer(self, tokens):
        return int(self.F[int(tokens[self.key])])

    def evaluate(self, tokens):
        tokens = np.asarray(tokens)
        valid = (tokens.shape[1] == self.L) & np.all((tokens >= 0) & (tokens < self.V), axis=1)
        return np.where(valid, self.F[np.clip(tokens[:, self.key], 0, self.V - 1)], -1), valid

    def answer_name(self, answer):
        return str(answer)

    def render(self, tokens):
        return " ".join(self.vocab[int(t)] for t in tokens)


def declines_formats(engine, problem) -> None:
    """An engine on fixed-point codes and saturated sums (`base.saturating_codes`) takes the problem
    and declines it under overflow = error and in a float format."""
    from dataclasses import replace

    from verifier.arithmetic import FixedPoint
    from verifier.engines import RunOptions
    from verifier.floats import FloatArith, float_format
    assert engine.unsupported(problem, RunOptions()) is None
    error = FixedPoint(problem.arith.p, problem.arith.f, "floor", "error")
    assert "overflow = saturate" in engine.unsupported(replace(problem, arith=error), RunOptions())
    bf16 = FloatArith(float_format("bf16"), float_format("fp32"), "nearest", "saturate")
    assert "float format" in engine.unsupported(replace(problem, arith=bf16), RunOptions())


def edit_model_file(src: Path, dst: Path, meta: Optional[Callable[[dict], None]] = None,
                    arrays: Optional[Callable[[dict], None]] = None, raw_meta: Optional[str] = None) -> Path:
    """Copy a model file with its metadata (a dict) and arrays (name -> array) edited in place."""
    with np.load(src) as z:
        data = {k: z[k] for k in z.files}
    doc = json.loads(str(data["meta"]))
    if meta:
        meta(doc)
    if arrays:
        arrays(data)
    data["meta"] = np.array(raw_meta if raw_meta is not None else json.dumps(doc))
    with open(dst, "wb") as fh:
        np.savez(fh, **data)
    return dst


def perturbed_dyck_rnn(rng: np.random.Generator, share: float, step: float = 0.25):
    """The recurrent Dyck-(2,2) network with a share of its weights moved by +-step (one code of the
    format: sometimes harmless, sometimes not)."""
    from verifier.constructions import CONSTRUCTIONS
    from verifier.model import Readout, Recurrent
    from verifier.tasks import make_task
    m = CONSTRUCTIONS["dyck22"].build(make_task("dyck22", N=4), "recurrent")
    move = lambda a: a + step * rng.choice([-1.0, 1.0], size=a.shape) * (rng.random(a.shape) < share)
    return Recurrent(move(m.U), move(m.W), move(m.b), m.h0,
                     Readout(move(m.readout.W_U), move(m.readout.b_U), "argmax", positions="all"), m.vocab)


def tracr_outputs(runs: list[tuple[str, list[list[str]]]], vocab: set, max_len: int) -> list[list[tuple]]:
    """Tracr's own forward pass (float64) and the RASP evaluator, per (program, inputs) of `runs`:
    for each input, the residual stream after the last layer at positions 1..n, and RASP's answers.
    Run it in a spawned process: JAX's threads must stay out of a test process that forks."""
    import jax
    jax.config.update("jax_enable_x64", True)
    from tracr.compiler import compiling, lib
    from tracr.rasp import rasp
    programs = {"make_reverse": lambda: lib.make_reverse(rasp.tokens)}
    out = []
    for name, inputs in runs:
        sop = programs[name]()
        assembled = compiling.compile_rasp_to_model(sop, vocab=vocab, max_seq_len=max_len, compiler_bos="BOS")
        out.append([(np.asarray(assembled.apply(["BOS"] + words).transformer_output, dtype=np.float64)[0, 1:],
                     rasp.evaluate(sop, words)) for words in inputs])
    return out


def box_bounds_hold(problem, monkeypatch, rng: np.random.Generator) -> list[int]:
    """Run the bounds engine on a problem, checking in every round, for random members of every box,
    that the last layer's logits, the heads' outputs and the readout's scores lie within the box's
    bounds, and that a member whose evaluation overflows (overflow = error) is in a box that says an
    overflow is possible.  Boxes are bounded down to two inputs.  Per box checked, how many of its
    positions held token sets (the caller asks for some)."""
    from verifier.engines import RunOptions, bounds
    from verifier.evaluator import Evaluator, trace
    from verifier.support.budget import Deadline

    ev = Evaluator(problem.model, problem.arith, tables=False)
    last = len(problem.model.layers) - 1
    original = bounds._Run._attention
    checked: list[int] = []

    def attention(self, boxes):
        att = original(self, boxes)
        lo, hi, head_ovf = self._head_outputs([h.raw for h in att.heads])
        ylo, yhi, post_ovf = self._post(lo, hi, self._query_code(boxes))
        possible = att.ovf | head_ovf | post_ovf
        sets = np.flatnonzero((boxes.dom >= 0).any(axis=1))  # boxes with token sets first, then any
        for b in np.concatenate([rng.permutation(sets)[:4], rng.choice(len(boxes), size=min(len(boxes), 2))]):
            dom = boxes.dom[b]
            tokens = np.array([rng.choice(self.domains[g]) if g >= 0 else -1 - g for g in dom])
            out, values = trace(ev, tokens)
            for hi_, h in enumerate(att.heads):
                s = values[f"L{last}.H{hi_}.logits"][-1]
                assert (h.slo[b] <= s).all() and (s <= h.shi[b]).all()
                o = values[f"L{last}.H{hi_}.out"][-1]
                assert (lo[b, hi_] <= o).all() and (o <= hi[b, hi_]).all(), (lo[b, hi_], o, hi[b, hi_])
            y = out.scores[0, -1] if out.scores.ndim == 3 else out.scores[0]
            assert (ylo[b] <= y).all() and (y <= yhi[b]).all()
            if problem.arith.overflow == "error" and (out.ovf_at[0, -1] if out.ovf_at is not None else out.ovf[0]):
                assert possible[b]
            checked.append(len(set(np.flatnonzero(dom >= 0).tolist())))
        return att

    monkeypatch.setattr(bounds._Run, "_attention", attention)
    monkeypatch.setattr(bounds, "LEAF_INPUTS", 2)  # bound boxes down to two inputs, not only single ones
    bounds.Bounds().run(problem, RunOptions(deadline=Deadline(120)))
    return checked


def prefix_shaped(problem: Problem, rng: np.random.Generator) -> Problem:
    """The construction with relative noise on the nonzero weights of some maps, not those that give
    it its shape (the uniform heads' queries and keys, the silent head's W_O) and the first layer's
    logits (E, P, the previous-token head's queries and keys: it stays local), in a random format."""
    scale = float(rng.choice([0.003, 0.03, 0.1]))
    keep = {"E", "P", "L0.H0.W_Q", "L0.H0.W_K", "L0.H1.W_Q", "L0.H1.W_K", "L1.W_O", "L2.H0.W_Q", "L2.H0.W_K"}

    def noise(name: str, w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        if name in keep or rng.random() < 0.7:
            return w
        return w * (1 + rng.normal(0, scale, size=w.shape) * (rng.random(w.shape) < 0.5))

    p = int(rng.integers(11, 17))
    arith = FixedPoint(p, int(rng.integers(3, 6)), str(rng.choice(ROUNDINGS)), "saturate", str(rng.choice(ACCUMULATES)))
    return replace(problem, model=problem.model.map_arrays(noise), arith=arith)


def lookup_shaped(problem: Problem, rng: np.random.Generator) -> Problem:
    """Noise on the construction that keeps its shape: the maps the keys and values read and the
    layers' writes only where they are non-zero (so no key reads a column a layer writes); the
    embeddings, queries and readout anywhere; in a random fixed-point format."""
    scale = float(rng.choice([0.02, 0.1, 0.5]))

    def noise(name: str, w: np.ndarray) -> np.ndarray:
        w = np.asarray(w, dtype=np.float64)
        shake = rng.normal(0, scale * (np.abs(w).max(initial=0) + 0.1), size=w.shape) * (rng.random(w.shape) < 0.3)
        if name[-3:] in ("W_K", "W_V", "W_O", "b_K", "b_V", "b_O") or name.endswith(("W2", "b2")):
            shake = shake * (w != 0)
        return w + shake

    p = int(rng.integers(5, 13))
    arith = FixedPoint(p, int(rng.integers(1, p - 1)), str(rng.choice(ROUNDINGS)), "saturate",
                       str(rng.choice(ACCUMULATES)))
    return replace(problem, model=problem.model.map_arrays(noise), arith=arith)


def random_saturating_format(rng: np.random.Generator, ps: tuple[int, int], f_spare: int) -> FixedPoint | Grid:
    """A random format of codes under overflow = saturate, in any rounding and accumulation: a quarter
    of the time a grid of step 1/k (k = 2..6, not a power of 2 for most), else FX(p, f) with p in
    ps[0] .. ps[1] - 1 and 1 <= f < p - f_spare."""
    rounding, accumulate = str(rng.choice(ROUNDINGS)), str(rng.choice(ACCUMULATES))
    if rng.random() < 0.25:
        return Grid.symmetric(Fraction(1, int(rng.integers(2, 7))), Fraction(int(rng.integers(2, 20))), rounding,
                              "saturate", accumulate)
    p = int(rng.integers(*ps))
    return FixedPoint(p, int(rng.integers(1, p - f_spare)), rounding, "saturate", accumulate)
