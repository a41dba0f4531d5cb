"""Two-sided tables at one N, the form in which Bhattamishra et al. 2024 (arXiv:2406.09347) and
Sanford, Hsu, Telgarsky 2024 (arXiv:2408.14332) state their separations: the built-in construction
of one architecture proved at N (a verdict of the engines), and shapes of the other architecture
certified impossible at the same N by counting (`shapes`), each with the smallest N at which its
count excludes it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from . import api, shapes
from .result import count_text
from .tasks import canonical

# per task: the construction's variant (None: the default), and the other side's shapes
SIDES = {
    "index_lookup": (None, ["rnn:16,8", "rnn:64,8", "rnn:64,16", "rnn:256,16"]),
    "dyck22": ("recurrent", ["tf1:1,4,8", "tf1:4,8,8", "tf1:8,16,16"]),
    "equality": (None, ["tf1:1,4,8", "tf1:4,8,16", "rnn:16,8", "rnn:64,16"]),
    "induction_heads": (None, ["tf1:1,1,2", "tf1:1,1,3", "tf1:1,1,4"]),
    "disjointness": (None, ["tf1:1,4,8", "rnn:16,8"]),
    "mqar": (None, ["rnn:16,8", "rnn:64,16"]),
}


@dataclass
class Table:
    task: str
    N: int
    construction: dict
    rows: list[shapes.Verdict] = field(default_factory=list)

    def markdown(self) -> str:
        c = self.construction
        out = [f"{self.task} at N = {self.N}", "",
               "| side | model | verdict at this N | evidence | smallest impossible N |", "|---|---|---|---|---|",
               f"| construction | {c['name']} ({c['shape']}) | {c['verdict'].upper()} at p = {c['p']} | "
               f"{c['inputs']} inputs by {c['engine']} in {c['seconds']:.1f} s | - |"]
        for v in self.rows:
            ev = "no count (Alice holds no prefix)" if v.count is None else \
                f"{_bits(v.count.value)} summaries vs {_bits(v.members)} members"
            out.append(f"| other | {v.shape.describe()} (`{v.shape.label}`) | {v.verdict.upper()} | {ev} | "
                       f"{v.smallest if v.smallest is not None else 'beyond 131,072'} |")
        return "\n".join(out)

    def to_json(self) -> dict:
        return {"task": self.task, "N": self.N, "construction": self.construction,
                "shapes": [v.to_json() for v in self.rows]}


def _bits(n: int) -> str:
    return f"2^{math.log2(n):.1f}"


def table(task_name: str, N: int, p: int, f: Optional[int], shape_list: Optional[list[shapes.Shape]],
          timeout: Optional[float], **options) -> Table:
    name = canonical(task_name)
    variant, default = SIDES.get(name, (None, []))
    r = api.prove(name, N=N, p=p, f=f, timeout=timeout, variant=variant, **options)
    model = r.params
    shape = ", ".join(f"{k}={model[k]}" for k in ("layers", "heads", "hidden", "d", "n_params") if k in model)
    out = Table(name, N, {"name": r.construction.get("construction"), "variant": variant or "default",
                          "shape": shape, "p": p, "f": r.arithmetic["f"], "verdict": r.verdict, "engine": r.engine,
                          "inputs": count_text(r.covered), "seconds": r.seconds})
    for s in shape_list or [shapes.parse_shape(x) for x in default]:
        out.rows.append(shapes.impossible(name, N, s, **options))
    return out
