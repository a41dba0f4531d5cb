"""Boolean functions on {0,1}^N (Bhattamishra et al. 2024, arXiv:2406.09347, Sections 4.2 and F).

* `Equality`: EQ(x) = 1 iff x_1..x_{N/2} = x_{N/2+1}..x_N (Theorem 6).  Tokens: the N bits.
* `SparseThreshold`: Th_b(g_{I_1}(x), ..., g_{I_N}(x)) = I[sum_i g_{I_i}(x) - b > 0], each g_{I_i}
  a Boolean function of the bits x_{I_i}, |I_i| <= s, g of the empty set = 0 (Theorem 13).
  Tokens: BOS, then the N bits (F.3 prepends BOS).  An instance comes from a seed or a JSON file.
* `Disjointness`: the instance I_i = {i, i + N/2}, g = AND, b = 0 of `SparseThreshold`, i.e. the
  paper's Disj(x, y) = max_i x_i y_i: **1 means the two halves intersect**, as in the paper's Appendix F.3.

Every input space is {0,1}^N, enumerated as the binary number x_1 x_2 ... x_N (x_1 most
significant).  The readout is one threshold bit: the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from ..support.errors import InputError
from ..support.schema import load_json_file
from ..support.sizes import Cost
from .base import FeatureSum, TaskOption
from .product import ProductTask

BITS = np.array([0, 1])


class _BooleanTask(ProductTask):
    readout = "threshold"
    num_classes = 1  # one output bit
    bos = False
    answer_names = ("0", "1")

    def _setup(self) -> None:
        if not isinstance(self.N, int) or self.N < 1:
            raise InputError(f"N must be an integer >= 1, got {self.N!r}")
        self.cost().admit()
        self.vocab = ["0", "1"] + (["BOS"] if self.bos else [])
        self.space = [("x in {0,1}^N", ([np.array([2])] if self.bos else []) + [BITS] * self.N)]
        self._layout([2 ** self.N], self.N + self.bos)

    def cost(self) -> Cost:
        """Per-position domains and features (an instance of N features)."""
        return Cost(f"{self.name} at N={self.N}", 200.0 * self.N, 2 + self.bos)

    def bit_position(self, i: int) -> int:
        """The sequence position of bit x_i (1-based i)."""
        return i if self.bos else i - 1

    def bits(self, tokens: np.ndarray) -> np.ndarray:
        return tokens[:, 1:] if self.bos else tokens

    def answer_name(self, answer: int) -> str:
        return self.answer_names[answer] if answer in (0, 1) else f"<{answer}>"


@dataclass
class Equality(_BooleanTask):
    N: int

    name = "equality"
    OPTIONS = ()
    answer_names = ("0 (different)", "1 (equal)")

    def __post_init__(self) -> None:
        if isinstance(self.N, int) and (self.N < 2 or self.N % 2):
            raise InputError(f"equality needs an even N >= 2 (two halves), got {self.N}")
        self._setup()

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "inputs": "x in {0,1}^N; answer 1 iff x_1..x_N/2 = x_N/2+1..x_N"}

    def evaluate(self, tokens):
        h = self.N // 2
        return np.all(tokens[:, :h] == tokens[:, h:], axis=1).astype(np.int64), np.ones(len(tokens), bool)

    def case_truth(self, c):
        h = self.N // 2
        return lambda S: S.as_int(S.all([S.eq(S.token(i), S.token(i + h)) for i in range(h)]))

    def feature_sum(self) -> FeatureSum:
        """EQ = 1 iff no pair (x_i, x_i+N/2) differs."""
        h, differ = self.N // 2, np.array([[0, 1], [1, 0]])
        return FeatureSum([((i, i + h), differ) for i in range(h)], lambda total: (total == 0).astype(np.int64))


@dataclass
class Instance:
    """Th_b(g_{I_1}, ..., g_{I_N}): features[i] = (I, g) for feature i+1; I holds 1-based bit
    indices, g the truth table over x_I read as a binary number (x_{I[0]} most significant)."""

    features: list[tuple[tuple[int, ...], np.ndarray]]
    b: float
    source: str
    sha256: Optional[str] = None  # of the file's bytes it was read from (a verdict cache keys on them)

    @property
    def s(self) -> int:
        return max([len(I) for I, _ in self.features] + [0])

    def g_by_size(self) -> Optional[dict[int, np.ndarray]]:
        """The one g of each feature size |I| >= 1, when all features of a size share their g; else None."""
        tables: dict[int, np.ndarray] = {}
        for I, g in self.features:
            if I and not np.array_equal(tables.setdefault(len(I), g), g):
                return None
        return tables

    def to_json(self) -> dict:
        return {"b": self.b, "features": [{"I": list(I), "g": g.tolist()} for I, g in self.features]}


def random_instance(N: int, s: int, seed: int, shared_g: bool) -> Instance:
    """Seeded: |I_i| uniform in 0..s (0 or s with shared_g; not all 0), random distinct indices,
    random g (g of the empty set is 0), b uniform in 0..max(0, N/2 - 1)."""
    rng = np.random.default_rng(seed)
    g_shared = rng.integers(0, 2, size=1 << s)
    sizes = np.zeros(N, dtype=np.int64)
    while not sizes.any():
        sizes = rng.choice([0, s], size=N) if shared_g else rng.integers(0, s + 1, size=N)
    features = []
    for m in sizes:
        I = tuple(sorted(int(i) + 1 for i in rng.choice(N, size=min(m, N), replace=False)))
        g = g_shared if shared_g and I else (rng.integers(0, 2, size=1 << len(I)) if I else np.zeros(1, np.int64))
        features.append((I, np.asarray(g, dtype=np.int64)))
    b = int(rng.integers(0, max(1, N // 2)))
    return Instance(features, b, f"seed {seed}" + (", shared g" if shared_g else ""))


INSTANCE_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "a sparse-threshold instance: Th_b(g_I1(x), ..., g_IN(x)) (sparse_threshold --instance)",
    "type": "object",
    "additionalProperties": False,
    "required": ["b", "features"],
    "properties": {
        "b": {"type": "number", "description": "the threshold: the answer is 1 iff sum_i g_Ii(x) > b"},
        "features": {"type": "array", "description": "at most N features; missing ones are empty (g = 0)",
                     "items": {"type": "object", "additionalProperties": False, "required": ["I", "g"],
                               "properties": {
                                   "I": {"type": "array", "uniqueItems": True,
                                         "items": {"type": "integer", "minimum": 1},
                                         "description": "1-based bit indices, distinct"},
                                   "g": {"type": "array", "minItems": 1,
                                         "items": {"type": "integer", "minimum": 0, "maximum": 1},
                                         "description": "truth table over x_I, x_I[0] most significant"}}}},
    },
}


def load_instance(path: str, N: int) -> Instance:
    """A JSON instance (INSTANCE_SCHEMA): {"b": 1, "features": [{"I": [1, 5], "g": [0, 1, 1, 0]}, ...]}."""
    data, digest = load_json_file(path, INSTANCE_SCHEMA, "instance")
    source = f"instance {path}"
    if len(data["features"]) > N:
        raise InputError(f"{source}: features: {len(data['features'])} features; at most N = {N}")
    features = []
    for n, f in enumerate(data["features"]):
        I, g = tuple(f["I"]), np.asarray(f["g"], dtype=np.int64)
        if any(i > N for i in I):
            raise InputError(f"{source}: features[{n}].I: indices must be in 1..{N}, got {list(I)}")
        if len(g) != 1 << len(I):
            raise InputError(f"{source}: features[{n}].g: expected {1 << len(I)} entries (2^|I|), got {len(g)}")
        if not I and g[0] != 0:
            raise InputError(f"{source}: features[{n}].g: g of the empty set must be 0 "
                             f"(Bhattamishra et al. 2024, Appendix F.3)")
        features.append((I, g))
    features += [((), np.zeros(1, np.int64))] * (N - len(features))
    return Instance(features, data["b"], str(path), digest)


@dataclass
class SparseThreshold(_BooleanTask):
    N: int
    s: int = 2
    instance: Optional[str] = None
    instance_seed: int = 0
    shared_g: bool = False

    name = "sparse_threshold"
    bos = True
    OPTIONS: ClassVar[tuple[TaskOption, ...]] = (
        TaskOption("s", int, 2, "Sparsity: bits per feature (random instances)."),
        TaskOption("instance", str, None, "Instance file (JSON: b and the features I, g).", path=True),
        TaskOption("instance_seed", int, 0, "Seed of the random instance."),
        TaskOption("shared_g", bool, False, "Random instance with one g for every feature (sizes 0 or s)."),
    )

    def __post_init__(self) -> None:
        self._setup()
        if self.instance is not None:
            self.inst = load_instance(self.instance, self.N)
        else:
            if not isinstance(self.s, int) or not 1 <= self.s <= 6:
                raise InputError(f"s (sparsity) must be an integer in 1..6, got {self.s!r}")
            if not isinstance(self.instance_seed, int) or self.instance_seed < 0:
                raise InputError(f"--instance-seed must be an integer >= 0, got {self.instance_seed!r}")
            self.inst = random_instance(self.N, self.s, self.instance_seed, self.shared_g)
        self.s = max(1, self.inst.s)

    def describe(self) -> dict:
        sizes = [len(I) for I, _ in self.inst.features]
        return {"name": self.name, "N": self.N, "s": self.s, "instance": self.inst.source, "b": self.inst.b,
                "feature_sizes": "".join(map(str, sizes)),
                "inputs": "BOS x with x in {0,1}^N; answer I[sum_i g_i(x_I_i) > b]"} | \
            ({"instance_sha256": self.inst.sha256} if self.inst.sha256 else {})

    def features(self, bits: np.ndarray) -> np.ndarray:
        """g_{I_i}(x) for every feature: (B, N)."""
        out = np.zeros(bits.shape, dtype=np.int64)
        for n, (I, g) in enumerate(self.inst.features):
            idx = np.zeros(len(bits), dtype=np.int64)
            for i in I:
                idx = 2 * idx + bits[:, i - 1]
            out[:, n] = g[idx]
        return out

    def evaluate(self, tokens):
        total = self.features(self.bits(tokens)).sum(axis=1)
        return (total > self.inst.b).astype(np.int64), np.ones(len(tokens), bool)

    def case_truth(self, c):
        # the sum of the N features lies in 0..N, so "sum > b" is "sum > floor(b)" with floor(b)
        # clamped to -1..N: exact, and the constant fits any encoding of the sum (b may be 2^35)
        bound = min(max(math.floor(self.inst.b), -1), self.N)

        def truth(S):
            feats = [S.func([self.bit_position(i) for i in I], g.reshape((2,) * len(I)))
                     for I, g in self.inst.features]
            return S.as_int(S.gt(S.total(feats), S.const(bound)))
        return truth

    def feature_sum(self) -> FeatureSum:
        """Th_b: the features on their bits' positions (tokens 0 and 1 are the bits); g of the empty
        set is a constant."""
        features = [(tuple(self.bit_position(i) for i in I), g.reshape((2,) * len(I))) for I, g in self.inst.features]
        base = sum(int(g) for I, g in features if not I)
        return FeatureSum([(I, g) for I, g in features if I], lambda total: (total > self.inst.b).astype(np.int64),
                          base)


@dataclass
class Disjointness(SparseThreshold):
    name = "disjointness"
    OPTIONS = ()
    answer_names = ("0 (disjoint)", "1 (intersect)")

    def __post_init__(self) -> None:
        if not isinstance(self.N, int) or self.N < 2 or self.N % 2:
            raise InputError(f"disjointness needs an even N >= 2 (two halves), got {self.N!r}")
        h = self.N // 2
        AND = np.array([0, 0, 0, 1])
        self._setup()
        self.inst = Instance([((i, i + h), AND) for i in range(1, h + 1)] + [((), np.zeros(1, np.int64))] * h,
                             0, "I_i = {i, i+N/2}, g = AND, b = 0")
        self.s = 2

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N,
                "inputs": "BOS x with x in {0,1}^N; answer 1 iff x_i = x_{i+N/2} = 1 for some i (intersect)"}
