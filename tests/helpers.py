"""Random small models of every kind, for differential tests."""

from __future__ import annotations

import numpy as np

from verifier.model import Head, Layer, Model, Readout


def random_model(rng: np.random.Generator, V: int, max_len: int, C: int = 2, readout: str | None = None,
                 scale: float = 1.5) -> Model:
    """1-2 layers, 1-2 heads, softmax or ReLU attention, causal or not, residual or not, FFN or not."""
    d = int(rng.integers(2, 5))
    m = int(rng.integers(1, 4))
    mv = int(rng.integers(1, 4))

    def w(*shape):
        # mostly grid-friendly values, sometimes zero, sometimes off-grid
        x = rng.normal(0, scale, size=shape)
        return np.where(rng.random(shape) < 0.2, 0.0, np.round(x * 8) / 8 + (rng.random(shape) < 0.3) * rng.normal(0, 0.05, size=shape))

    layers = []
    for _ in range(int(rng.integers(1, 3))):
        H = int(rng.integers(1, 3))
        attention = "softmax" if rng.random() < 0.6 else "relu"
        heads = [Head(w(m, d), w(m, d), w(mv, d)) for _ in range(H)]
        W_O = w(d, mv if attention == "relu" else H * mv)
        ffn = {}
        if rng.random() < 0.6:
            h = int(rng.integers(1, 4))
            ffn = dict(W1=w(h, d), b1=w(h), W2=w(d, h), b2=w(d))
        layers.append(Layer(heads, W_O, attention, residual=bool(rng.random() < 0.7),
                            causal=bool(rng.random() < 0.3), **ffn))
    kind = readout or ("argmax" if rng.random() < 0.7 else "threshold")
    model = Model(E=w(V, d), P=w(max_len, d), P_mask=rng.random(V) < 0.8, layers=layers,
                  readout=Readout(w(C, d), w(C), kind, float(np.round(rng.normal(0, 0.5) * 4) / 4)),
                  vocab=[f"t{i}" for i in range(V)])
    model.validate()
    return model


class RandomLookupTask:
    """A test task: every sequence of length L over V tokens; the answer is F[token at `key`].

    With a threshold readout the answer is a bit pattern of `bits` bits."""

    name = "random_lookup"

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
            yield self._Case(f"last={last}", doms, lambda S, F=self.F[doms[self.key]]: S.lookup(self.key, F), 0, per)

    def decode(self, index):
        return next(self.batches(index, index + 1, 1)).tokens[0]

    def index_of(self, tokens):
        return int(sum(int(t) * self.V ** (self.L - 1 - i) for i, t in enumerate(tokens)))

    def answer(self, tokens):
        return int(self.F[int(tokens[self.key])])

    def answer_name(self, answer):
        return str(answer)

    def render(self, tokens):
        return " ".join(self.vocab[int(t)] for t in tokens)
