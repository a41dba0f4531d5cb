"""Two-sided tables at one N, the form in which Bhattamishra et al. 2024 (arXiv:2406.09347) and
Sanford, Hsu, Telgarsky 2024 (arXiv:2408.14332) state their separations: the built-in construction
of one architecture proved at N (a verdict of the engines), and shapes of the other architecture
certified impossible at the same N by counting (`shapes`), each with the smallest N at which its
count excludes it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional

from ..result import count_text
from ..runs import api
from ..support.errors import InputError
from ..tasks import canonical
from . import fooling, shapes

# per task: the construction's variant (None: the default), and the other side's shapes
SIDES = {
    "index_lookup": (None, ["rnn:16,8", "rnn:64,8", "rnn:64,16", "rnn:256,16"]),
    "dyck22": ("recurrent", ["tf1:1,4,8", "tf1:4,8,8", "tf1:8,16,16"]),
    "equality": (None, ["tf1:1,1,4", "tf1:1,2,8", "rnn:8,8", "rnn:16,8"]),
    "induction_heads": (None, ["tf1:1,1,2,relu", "tf1:1,1,3,relu", "tf1:1,1,2"]),
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
                       f"{v.smallest if v.smallest is not None else f'beyond {shapes.SMALLEST_LIMIT:,}'} |")
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


# -- the frontier from both sides --------------------------------------------------------------------
def parse_family(text: str) -> shapes.Shape:
    """A shape without its bits: ``rnn:M`` or ``tf1:H,M[,softmax|relu]`` (P ranges over 2..MAX_P)."""
    kind, _, rest = text.partition(":")
    parts = rest.split(",")
    with_p = f"{kind}:{','.join(parts[:2] + ['2'] + parts[2:])}" if kind == "tf1" else f"{text},2"
    try:
        return shapes.parse_shape(with_p)
    except InputError:
        raise InputError("a family of shapes is rnn:M or tf1:H,M[,softmax|relu] (the bits vary), "
                         f"got {text!r}") from None


def family_label(s: shapes.Shape) -> str:
    return (f"rnn:{s.width}" if s.kind == "rnn"
            else f"tf1:{s.heads},{s.width}" + (f",{s.attention}" if s.attention else ""))


def largest_impossible_p(name: str, N: int, family: shapes.Shape, **options) -> Optional[int]:
    """The largest P such that every model of the family at every P' in 2..P bits is certified
    impossible at N by the count (None: not even at 2 bits, or no fooling set at N)."""
    size = fooling.size(name, N, **options)
    best = None
    for P in range(2, shapes.MAX_P + 1):
        if size is None or not shapes.excludes(replace(family, p=P), size, None, None, "product"):
            break
        best = P
    return best


def sweep_figure(task_name: str, sweep_path: str, families: Optional[str] = None, **options):
    """`frontier_figure` of the task from a sweep file (checked: a sweep, of this task), for the
    families given as text (';'-separated, `parse_family`) or the task's default ladder."""
    from ..outputs.report import load
    kind, sweep = load(sweep_path)
    name = canonical(task_name)
    if kind != "sweep" or canonical(sweep.get("task", "")) != name:
        raise InputError(f"{sweep_path} is not a sweep of {name} (verify sweep {name} -o FILE.json)")
    shapes_ = [parse_family(x) for x in families.split(";")] if families else default_families(name)
    return frontier_figure(name, sweep, shapes_, **options)


def frontier_figure(name: str, sweep: dict, families: list[shapes.Shape], **options):
    """Both sides in the (log2 N, p) plane: the construction's p* from a sweep (`verify sweep -o`:
    proved at p* and every larger p of the sweep), and for each family of the other architecture
    the largest P at which every model of it is certified impossible (every P' <= P; shaded)."""
    from ..outputs.plots import _pyplot, series_label
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    rows = [r for r in sweep["rows"] if r.get("p_star") is not None]
    if not rows:
        raise InputError("the sweep has no proved point (p*) to draw")
    lo, hi = min(r["N"] for r in rows), max(r["N"] for r in rows)
    Ns = sorted({r["N"] for r in rows} | {1 << k for k in range(lo.bit_length() - 1, hi.bit_length())} - {1})
    for i, fam in enumerate(families):
        pts = [(math.log2(N), largest_impossible_p(name, N, fam, **options)) for N in Ns]
        pts = [(x, p) for x, p in pts if p is not None]
        if not pts:
            continue
        xs, ps = zip(*pts)
        color = f"C{i + 1}"
        ax.plot(xs, ps, "s-", color=color, linewidth=1.5, markersize=4,
                label=f"{family_label(fam)}: every model at <= P bits impossible (counted)")
        ax.fill_between(xs, 2, ps, color=color, alpha=0.12)
    ax.plot([math.log2(r["N"]) for r in rows], [r["p_star"] for r in rows], "o-", color="C0", linewidth=2,
            label=f"{series_label(sweep)} ({sweep['arithmetic'].get('f')}): proved at p >= p*")
    ax.set_xlabel("log2 N")
    ax.set_ylabel("bits p")
    ax.set_ylim(2, shapes.MAX_P + 1)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{name}: the construction above p*, the other side impossible below (capped at {shapes.MAX_P})",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def default_families(name: str) -> list[shapes.Shape]:
    """The other side of the task's separation (`SIDES`), without its bits."""
    seen = []
    for text in SIDES.get(name, (None, []))[1]:
        fam = replace(shapes.parse_shape(text), p=2)
        if fam not in seen:
            seen.append(fam)
    return seen
