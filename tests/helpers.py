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
