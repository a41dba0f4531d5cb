"""L-fold sequential function composition (Chen, Peng, Wu 2024, arXiv:2412.02975, Definition 2.1;
L decoder layers cannot do it when H d p is small, L + 1 layers can).

With N_0 = m (``--N``) and N_l = N_{l-1} n (``--n``, the size of each query coordinate):
z_0 in [m] is a seed, z_1 : [N_0] -> [N_0], and z_l : [N_{l-1}] -> [N_{l-1}] for l = 2..L reads a
pair (w_{l-1}, i_{l-1}) in [n] x [N_{l-2}] as the element e = w_{l-1} N_{l-2} + i_{l-1}.  The query
is w = (w_1, ..., w_{L-1}).  The answer, read at the last position, is i_L, where i_0 = z_0,
i_1 = z_1(i_0) and i_l = z_l(w_{l-1}, i_{l-1}).

The prompt puts the players with larger index first, as the paper's communication model does:

    [ z_L: N_{L-1} tokens ] ... [ z_1: N_0 tokens ] [ z_0 ] [ w ]

The token at offset e of block l is ``z<l>=<v>``, v = z_l(e); then ``z0=<v>`` and ``w=<w_1>.<w_2>..``.
Order of enumeration: one case per (z_0, w), then the blocks' values as a mixed-radix number
(the first position of the prompt most significant).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..support.errors import InputError
from ..support.sizes import MAX_TOKENS, Cost
from .base import Domains, TaskOption
from .product import ProductTask, product_size


@dataclass
class Composition(ProductTask):
    N: int
    depth: int = 2
    n: int = 2

    name = "composition"
    readout = "argmax"
    OPTIONS = (TaskOption("depth", int, 2, "L, how many functions are composed."),
               TaskOption("n", int, 2, "n, the size of each query coordinate w_l (the paper's n; not the size --N).",
                          spelled="--coord-size"))

    def __post_init__(self) -> None:
        for name, value, low in (("N", self.N, 1), ("depth", self.depth, 1), ("n", self.n, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
        L, m = self.depth, self.N
        self.cost().admit()
        self.sizes = [m * self.n ** l for l in range(L)]  # N_0 .. N_{L-1}: block l has N_{l-1} tokens
        self.queries = list(itertools.product(range(self.n), repeat=L - 1))
        self.value_base = {}  # block l -> the token id of value 0
        self.vocab = []
        for l in range(L, 0, -1):
            self.value_base[l] = len(self.vocab)
            self.vocab += [f"z{l}={v}" for v in range(self.sizes[l - 1])]
        self.value_base[0] = len(self.vocab)
        self.vocab += [f"z0={v}" for v in range(m)]
        self.first_query = len(self.vocab)
        self.vocab += ["w=" + (".".join(map(str, w)) or "()") for w in self.queries]
        self.block_start = {}  # block l -> the position of its offset 0
        pos = 0
        for l in range(L, 0, -1):
            self.block_start[l] = pos
            pos += self.sizes[l - 1]
        blocks = [domain for l in range(L, 0, -1)  # block l's positions share one domain: its values
                  for domain in [self.value_base[l] + np.arange(self.sizes[l - 1])] * self.sizes[l - 1]]
        prefixes = [blocks + [np.array([self.value_base[0] + z0])] for z0 in range(m)]  # shared by the queries
        self.space = [(f"z0={z0}, w={self.vocab[self.first_query + wi][2:]}",
                       Domains(prefixes[z0], np.array([self.first_query + wi])))
                      for z0 in range(m) for wi in range(len(self.queries))]
        self.num_classes = self.sizes[L - 1]
        self._layout([product_size(blocks)] * len(self.space), pos + 2)  # every case has the same blocks

    def cost(self) -> Cost:
        """The tokens (the L blocks' values, z_0's, the queries'), counted before a list of them is
        made; m lists of a domain per position; the m n^(L-1) cases and their offsets, integers of
        about positions x log2 N_{L-1} bits."""
        L, m, n = self.depth, self.N, self.n
        what = f"composition with N={m}, depth={L}, n={n}"
        if m * L > MAX_TOKENS or (n > 1 and L - 1 > MAX_TOKENS.bit_length()):  # not counted further
            raise InputError(f"{what} has more than {MAX_TOKENS:,} tokens (N x depth values, n^(depth-1) queries); "
                             f"the verifier takes at most {MAX_TOKENS:,}")
        positions = m * (n ** L - 1) // (n - 1) if n > 1 else m * L  # N_0 + ... + N_{L-1}
        queries = n ** (L - 1)
        tokens = positions + m + queries
        cases = m * queries
        return Cost(what, 200.0 * tokens + 8.0 * m * positions
                    + cases * (300.0 + positions * math.log2(max(2, m * n ** (L - 1))) / 8), tokens)

    def describe(self) -> dict:
        return {"name": self.name, "N": self.N, "depth": self.depth, "n": self.n,
                "inputs": "blocks z_L .. z_1, then z_0 and w; answer i_L at the last position"}

    def evaluate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tokens = np.asarray(tokens, dtype=np.int64)
        B, T = tokens.shape
        valid = np.full(B, T == self.max_len)
        if not valid.any():
            return np.full(B, -1), valid
        for l in range(1, self.depth + 1):
            block = tokens[:, self.block_start[l]:self.block_start[l] + self.sizes[l - 1]] - self.value_base[l]
            valid &= np.all((block >= 0) & (block < self.sizes[l - 1]), axis=1)
        z0 = tokens[:, -2] - self.value_base[0]
        wi = tokens[:, -1] - self.first_query
        valid &= (z0 >= 0) & (z0 < self.N) & (wi >= 0) & (wi < len(self.queries))
        rows = np.arange(B)
        w = np.array(self.queries, dtype=np.int64).reshape(len(self.queries), -1)[np.where(valid, wi, 0)]
        i = np.where(valid, z0, 0)
        for l in range(1, self.depth + 1):
            e = i if l == 1 else w[:, l - 2] * self.sizes[l - 2] + i
            i = tokens[rows, self.block_start[l] + e] - self.value_base[l]
        return np.where(valid, i, -1), valid

    def answer_needs(self, tokens: np.ndarray, fixed: np.ndarray) -> np.ndarray:
        """Per partial assignment (tokens (B, L), and which positions are fixed (B, L)): the first
        position the answer reads that is not fixed, chasing z_0 -> z_1(i_0) -> ... -> z_L(w_{L-1}, i_{L-1});
        -1 when every position it reads is fixed (then the answer is the same on every completion)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        B, T = tokens.shape
        rows = np.arange(B)
        need = np.where(~fixed[:, T - 1], T - 1, np.where(~fixed[:, T - 2], T - 2, -1))
        w = np.array(self.queries, dtype=np.int64).reshape(len(self.queries), -1)
        w = w[np.clip(tokens[:, -1] - self.first_query, 0, len(self.queries) - 1)]
        i = np.clip(tokens[:, -2] - self.value_base[0], 0, self.N - 1)
        for l in range(1, self.depth + 1):
            e = i if l == 1 else w[:, l - 2] * self.sizes[l - 2] + i
            pos = self.block_start[l] + e
            need = np.where((need < 0) & ~fixed[rows, pos], pos, need)
            i = np.clip(tokens[rows, pos] - self.value_base[l], 0, self.sizes[l - 1] - 1)
        return need

    def case_truth(self, c: int) -> Callable:
        z0, w = divmod(c, len(self.queries))
        w = self.queries[w]

        def truth(S):
            def value(l: int, e: int):
                pos = self.block_start[l] + e
                return S.lookup(pos, S.domains[pos] - self.value_base[l])

            i = value(1, z0)
            for l in range(2, self.depth + 1):
                base = w[l - 2] * self.sizes[l - 2]
                i = S.select([value(l, base + b) for b in range(self.sizes[l - 2])], i)
            return i

        return truth

    def answer_name(self, answer: int) -> str:
        return str(answer) if 0 <= answer < self.num_classes else f"<{answer}>"
