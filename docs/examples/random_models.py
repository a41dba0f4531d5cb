"""The random models of the refutation and lower-bound pages (docs/results/refutation.md,
docs/lower-bounds.md, docs/count.md), written by name, so each transcript can make its own:

    python3 docs/examples/random_models.py icqa-relu.npz eq-softmax.npz

A path's file name picks the recipe (see RECIPES); it is written where the path says, never over
an existing file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import verifier
from verifier.model import Readout, Recurrent
from verifier.refute.refute import random_model
from verifier.tasks import make_task

FIRST_IS_LAST = str(Path(__file__).with_name("first_is_last.py")) + ":f"


def rnn(task, hidden: int, seed: int) -> Recurrent:
    """A random recurrent network with a readout at the positions the task answers."""
    r = np.random.default_rng(seed)
    V, C = len(task.vocab), task.num_classes
    return Recurrent(r.normal(0, 1, (V, hidden)), r.normal(0, 1, (hidden, hidden)), r.normal(0, 1, hidden),
                     np.zeros(hidden), Readout(r.normal(0, 1, (C, hidden)), r.normal(0, 1, C), task.readout,
                     positions="all" if task.per_position else "last"), list(task.vocab),
                     info={"construction": f"random recurrent, {hidden} hidden"})


def softmax(task, seed: int):
    return random_model(task, 1, 2, "softmax", np.random.default_rng(seed))


RECIPES = {
    "icqa-relu.npz": lambda: random_model(make_task("icqa", 3, nq=8, na=8), 2, 3, "relu", np.random.default_rng(1)),
    "eq-softmax.npz": lambda: softmax(make_task("equality", 8), 1),
    "idxl-rnn.npz": lambda: rnn(make_task("index_lookup", 12), 4, 3),
    "ih-rnn.npz": lambda: rnn(make_task("induction_heads", 12), 4, 3),
    "ih-softmax.npz": lambda: softmax(make_task("induction_heads", 8), 1),
    "dyck-softmax.npz": lambda: softmax(make_task("dyck22", 12), 0),
    "dyck-rnn.npz": lambda: rnn(make_task("dyck22", 12), 4, 3),
    "ref-softmax.npz": lambda: softmax(make_task("reference", 6, reference=FIRST_IS_LAST, vocab="a,b,c"), 0),
}


def main(paths: list[str]) -> int:
    for path in paths:
        name = Path(path).name
        if name not in RECIPES:
            print(f"random_models.py: error: no recipe for {name}; known: {', '.join(RECIPES)}", file=sys.stderr)
            return 2
        if Path(path).exists():
            print(f"random_models.py: error: {path} exists; not overwritten", file=sys.stderr)
            return 2
        verifier.save_model(RECIPES[name](), path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
