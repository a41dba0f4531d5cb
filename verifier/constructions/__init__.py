"""Built-in constructions, by the task they solve, each with its variants.

A builder takes the task (its size parameters), the variant and the construction options:
``builder(task, variant=..., k=..., eta=..., seed=..., kc=...)``.  Before it runs, the
construction states its size from the same parameters, in closed form (``cost(task, variant, k)``:
the model's width d and rows, the tables it draws, their memory; `verifier.support.sizes.Cost`), and a size
that cannot fit is refused there, with nothing built.  ``kc`` is the arithmetic's
Kc at the task's N (`Fixed.kc`): Bhattamishra et al.'s printed scales depend on the precision
through Kc, whose grid has step N^-Kc (Appendix B.2): for FX(p, f), Kc = f / log2 N; for the B.2
grid, its own Kc; for a grid of step 1/D, log D / log N (docs/constructions.md, "Conventions").
A variant that cannot be built as printed is listed in ``unbuildable`` with the reason, which is
the error a user who asks for it gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from ..model import Model
from ..support.errors import InputError, UnbuildableError
from ..support.sizes import Cost
from . import (
    composition,
    dyck,
    equality,
    icqa,
    ictm,
    index_lookup,
    induction_heads,
    memorization,
    nearest_neighbour,
    sparse_threshold,
    templates,
)


@dataclass(frozen=True)
class Construction:
    name: str
    theorem: str
    builder: Callable[..., Model]
    cost: Callable[..., Cost]  # (task, variant, k) -> what the builder will take, from the sizes alone
    variants: dict[str, str]  # variant -> what it is
    unbuildable: dict[str, str] = field(default_factory=dict)  # variant -> why it cannot be built
    default: str = "corrected"
    options: tuple[str, ...] = ("variant", "k", "eta", "seed")  # the construction options it takes

    def build(self, task, variant: Optional[str] = None, k: Optional[int] = None, eta: Optional[float] = None,
              seed: int = 0, kc: Optional[float] = None) -> Model:
        variant = self.default if variant is None else variant
        if variant in self.unbuildable:
            raise UnbuildableError(f"{self.name} --variant {variant}: {self.unbuildable[variant]}")
        if variant not in self.variants:
            raise InputError(f"{self.name} has no variant {variant!r}; its variants: {', '.join(self.variants)}")
        for option, value in (("k", k), ("eta", eta)):
            if value is not None and option not in self.options:
                raise InputError(f"the {self.name} construction has no parameter {option}")
        if k is not None and k < 1:
            raise InputError(f"k must be >= 1, got {k}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InputError(f"--seed must be an integer >= 0, got {seed!r}")
        self.cost(task, variant, k).admit()
        return self.builder(task, variant=variant, k=k, eta=eta, seed=seed, kc=kc)


def _index_lookup(task, variant, k, eta, seed, kc):
    return index_lookup.build(task.N, sigma=task.sigma, k=k, eta=eta, seed=seed, variant=variant)


def _index_lookup_cost(task, variant, k):
    return index_lookup.cost(task.N, task.sigma, k, variant)


_SPARSE_THRESHOLD = Construction("sparse_threshold", sparse_threshold.THEOREM, sparse_threshold.build,
                                 sparse_threshold.cost, sparse_threshold.VARIANTS)
_NEAREST_NEIGHBOUR = Construction("nearest_neighbour", nearest_neighbour.THEOREM, nearest_neighbour.build,
                                  nearest_neighbour.cost, nearest_neighbour.VARIANTS)

CONSTRUCTIONS = {
    "index_lookup": Construction("index_lookup", index_lookup.THEOREM, _index_lookup, _index_lookup_cost,
                                 index_lookup.VARIANTS),
    "equality": Construction("equality", equality.THEOREM, equality.build, equality.cost, equality.VARIANTS),
    "disjointness": _SPARSE_THRESHOLD,  # the instance I_i = {i, i+N/2}, g = AND, b = 0
    "sparse_threshold": _SPARSE_THRESHOLD,
    "nearest_neighbour": _NEAREST_NEIGHBOUR,
    "mqar": _NEAREST_NEIGHBOUR,  # keys, then a permutation of them as queries
    "memorization": Construction("memorization", memorization.THEOREM, memorization.build, memorization.cost,
                                 memorization.VARIANTS, options=("variant",)),
    "icqa": Construction("icqa", icqa.THEOREM, icqa.build, icqa.cost, icqa.VARIANTS, default="paper",
                         options=("variant",)),
    "template_matching": Construction("template_matching", templates.THEOREM, templates.build, templates.cost,
                                      templates.VARIANTS, options=("variant",)),
    "ictm": Construction("ictm", ictm.THEOREM, ictm.build, ictm.cost, ictm.VARIANTS, options=("variant",)),
    "induction_heads": Construction("induction_heads", induction_heads.THEOREM, induction_heads.build,
                                    induction_heads.cost, induction_heads.VARIANTS, default="designed",
                                    options=("variant", "eta")),
    "dyck22": Construction("dyck22", dyck.THEOREM, dyck.build, dyck.cost, dyck.VARIANTS, default="transformer",
                           options=("variant",)),
    "composition": Construction("composition", composition.THEOREM, composition.build, composition.cost,
                                composition.VARIANTS, default="designed", options=("variant", "eta")),
}

__all__ = ["CONSTRUCTIONS", "Construction"]
