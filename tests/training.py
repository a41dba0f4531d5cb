"""A tiny trainer: one attention layer (ReLU or softmax, any heads), an optional ReLU FFN and a
linear readout, fitted by plain numpy gradient descent (Adam, gradients by hand) on a whole
enumerable task, and exported as a `Model`.  It gives the refuter models that are as good as
training makes them, rather than random ones.  The same float forward pass as the model format:
softmax heads concatenated, ReLU heads averaged, then W_O, the residual, the FFN, the readout."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verifier.model import Head, Layer, Model, Readout


@dataclass
class Shape:
    attention: str = "relu"
    heads: int = 1
    d: int = 16
    m: int = 8
    ffn: int = 0
    residual: bool = True


def dataset(task) -> tuple[np.ndarray, np.ndarray]:
    rows = [(b.tokens, b.expected) for b in task.batches(0, task.total, 4096)]
    return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])


def init(task, shape: Shape, rng: np.random.Generator) -> dict:
    V, n, C, d, m, H = len(task.vocab), task.max_len, task.num_classes, shape.d, shape.m, shape.heads
    shapes = {"E": (V, d), "P": (n, d), "U": (C, d), "b": (C,), "O": (d, H * m if shape.attention == "softmax" else m)}
    for h in range(H):
        shapes |= {f"Q{h}": (m, d), f"K{h}": (m, d), f"V{h}": (m, d)}
    if shape.ffn:
        shapes |= {"W1": (shape.ffn, d), "b1": (shape.ffn,), "W2": (d, shape.ffn), "b2": (d,)}
    return {k: rng.normal(0, 0.5, s) for k, s in shapes.items()}


def loss_and_grads(w: dict, T: np.ndarray, y: np.ndarray, shape: Shape,
                   threshold: bool) -> tuple[float, dict, np.ndarray]:
    """Cross-entropy of the readout on tokens T (B, n) with answers y, its gradients, and the outputs."""
    B, H, m = len(T), shape.heads, shape.m
    X = w["E"][T] + w["P"][None]
    cache, outs = [], []
    for h in range(H):
        q, K, Vv = X[:, -1] @ w[f"Q{h}"].T, X @ w[f"K{h}"].T, X @ w[f"V{h}"].T
        s = np.einsum("bnm,bm->bn", K, q)
        if shape.attention == "softmax":
            e = np.exp(s - s.max(1, keepdims=True))
            a = e / e.sum(1, keepdims=True)
        else:
            a = np.maximum(s, 0)
        outs.append(np.einsum("bn,bnm->bm", a, Vv))
        cache.append((q, K, Vv, s, a))
    head = np.concatenate(outs, 1) if shape.attention == "softmax" else np.mean(outs, axis=0)
    h1 = head @ w["O"].T + (X[:, -1] if shape.residual else 0)
    if shape.ffn:
        pre = h1 @ w["W1"].T + w["b1"]
        hid = np.maximum(pre, 0)
        h2 = hid @ w["W2"].T + w["b2"] + (h1 if shape.residual else 0)
    else:
        h2 = h1
    o = h2 @ w["U"].T + w["b"]
    if threshold:
        prob = 1 / (1 + np.exp(-o[:, 0]))
        loss = -np.mean(np.where(y == 1, np.log(prob + 1e-12), np.log(1 - prob + 1e-12)))
        do = ((prob - (y == 1)) / B)[:, None]
    else:
        e = np.exp(o - o.max(1, keepdims=True))
        prob = e / e.sum(1, keepdims=True)
        loss = -np.mean(np.log(prob[np.arange(B), y] + 1e-12))
        do = (prob - np.eye(o.shape[1])[y]) / B
    g = {"U": do.T @ h2, "b": do.sum(0)}
    dh2 = do @ w["U"]
    if shape.ffn:
        g["W2"], g["b2"] = dh2.T @ hid, dh2.sum(0)
        dpre = (dh2 @ w["W2"]) * (pre > 0)
        g["W1"], g["b1"] = dpre.T @ h1, dpre.sum(0)
        dh1 = dpre @ w["W1"] + (dh2 if shape.residual else 0)
    else:
        dh1 = dh2
    dX = np.zeros_like(X)
    if shape.residual:
        dX[:, -1] += dh1
    g["O"] = dh1.T @ head
    dhead = dh1 @ w["O"]
    for h, (q, K, Vv, s, a) in enumerate(cache):
        dout = dhead[:, h * m:(h + 1) * m] if shape.attention == "softmax" else dhead / H
        da = np.einsum("bm,bnm->bn", dout, Vv)
        ds = a * (da - (da * a).sum(1, keepdims=True)) if shape.attention == "softmax" else da * (s > 0)
        dq, dK, dVv = np.einsum("bn,bnm->bm", ds, K), ds[..., None] * q[:, None, :], a[..., None] * dout[:, None, :]
        g[f"Q{h}"] = dq.T @ X[:, -1]
        g[f"K{h}"] = np.einsum("bnm,bnd->md", dK, X)
        g[f"V{h}"] = np.einsum("bnm,bnd->md", dVv, X)
        dX[:, -1] += dq @ w[f"Q{h}"]
        dX += dK @ w[f"K{h}"] + dVv @ w[f"V{h}"]
    g["E"] = np.zeros_like(w["E"])
    np.add.at(g["E"], T, dX)
    g["P"] = dX.sum(0)
    return float(loss), g, o


def sample(task, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`count` examples at random enumeration indices (for datasets too large to train on whole)."""
    T = np.array([task.decode(int(i)) for i in rng.integers(0, task.total, size=count)])
    return T, task.evaluate(T)[0]


def train(task, shape: Shape, steps: int = 2000, lr: float = 0.02, seed: int = 0,
          data: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Model, float]:
    """The trained model and its float accuracy on the data (default: the whole task)."""
    rng = np.random.default_rng(seed)
    T, y = data if data is not None else dataset(task)
    threshold = task.readout == "threshold"
    w = init(task, shape, rng)
    moments = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in w.items()}
    for step in range(1, steps + 1):
        _, g, _ = loss_and_grads(w, T, y, shape, threshold)
        for k in w:
            m1, m2 = moments[k]
            m1 += 0.1 * (g[k] - m1)
            m2 += 0.001 * (g[k] ** 2 - m2)
            w[k] -= lr * (m1 / (1 - 0.9 ** step)) / (np.sqrt(m2 / (1 - 0.999 ** step)) + 1e-8)
    o = loss_and_grads(w, T, y, shape, threshold)[2]
    accuracy = float(np.mean((o[:, 0] > 0) == (y == 1)) if threshold else np.mean(o.argmax(1) == y))
    ffn = {"W1": w["W1"], "b1": w["b1"], "W2": w["W2"], "b2": w["b2"]} if shape.ffn else {}
    layer = Layer([Head(w[f"Q{h}"], w[f"K{h}"], w[f"V{h}"]) for h in range(shape.heads)], w["O"],
                  attention=shape.attention, residual=shape.residual, causal=False, **ffn)
    model = Model(E=w["E"], P=w["P"], P_mask=np.ones(len(task.vocab), bool), layers=[layer],
                  readout=Readout(w["U"], w["b"], task.readout), vocab=list(task.vocab),
                  info={"construction": f"trained ({shape.heads} {shape.attention} head(s), float accuracy "
                                        f"{accuracy:.3f})"})
    return model, accuracy
