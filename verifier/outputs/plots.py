"""Figures, with matplotlib (an optional extra: ``pip install -e '.[plot]'``).

* `frontier_figure`: p* against log2 N for one or more sweeps (`verify sweep -o X.json`), one
  series per construction, each with its least-squares line;
* `attention_figure`: a counterexample's attention weights, per head, in FX beside the real
  (float64, unquantized) weights and their difference, from a dump (`--dump DIR`), titled with the
  first departure of FX from the real values (by residual row name, ``L0.out[m]``, where the
  model names its rows).

The output format follows the file name: .png or .svg.
"""

from __future__ import annotations

import importlib.util
import io
import math
import re
from pathlib import Path
from typing import IO, Optional

import numpy as np

from ..support.errors import InputError
from ..support.files import check_new, new_file
from ..tasks import canonical
from .dump import departure_text

FORMATS = (".png", ".svg")
ATTENTION = re.compile(r"^L(\d+)\.H(\d+)\.attn$")


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("plots need matplotlib: pip install 'verify[plot]'")


def check_output(path: str | Path, force: bool = False) -> None:
    """The figure's file name: a .png or .svg that does not exist (nothing is overwritten unless `force`)."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise InputError(f"{path}: a figure is written as .png or .svg")
    check_new(path, force)
    require_matplotlib()


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # files only: no display
    import matplotlib.pyplot as plt
    return plt


def series_label(frontier: dict) -> str:
    """The task, and the construction when it is named otherwise (disjointness is decided by the
    sparse-threshold construction, MQAR by nearest neighbour's)."""
    task = canonical(frontier["task"])
    construction = (frontier.get("construction") or {}).get("construction")
    return task + (f" ({construction})" if construction and construction != task else "")


def frontier_figure(frontiers: list[dict]):
    """p* against log2 N: each sweep's points, and its fitted line p* = a log2 N + c."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    for i, fr in enumerate(frontiers):
        pts = [(math.log2(r["N"]), r["p_star"]) for r in fr["rows"] if r.get("p_star") is not None]
        if not pts:
            continue
        color = f"C{i % 10}"
        fit = fr.get("fit") or {}
        label = series_label(fr)
        if fit.get("slope") is not None:
            a, c = fit["slope"], fit["intercept"]
            label += f": p* = {a:.2f} log2 N {'-' if c < 0 else '+'} {abs(c):.2f}"
            xs = np.linspace(min(x for x, _ in pts), max(x for x, _ in pts), 50)
            ax.plot(xs, a * xs + c, "--", color=color, linewidth=1)
        ax.plot(*zip(*pts), "o", color=color, label=label)
    rules = {fr["arithmetic"].get("f") for fr in frontiers}
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("log2 N")
    ax.set_ylabel("p* (smallest p proved, and every larger p)")
    ax.set_title("Precision frontier" + (f" ({rules.pop()})" if len(rules) == 1 else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def attention_heads(document: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Head name -> (FX weights, real weights), each queries x keys, from a dump's trace."""
    heads = {}
    for name, v in document.get("trace", {}).items():
        if ATTENTION.match(name) and v.get("real") is not None:
            heads[name[:-len(".attn")]] = (np.atleast_2d(np.asarray(v["values"], dtype=float)),
                                          np.atleast_2d(np.asarray(v["real"], dtype=float)))
    return heads


def attention_figure(document: dict):
    """Per head: the FX attention weights, the real ones, and FX - real."""
    heads = attention_heads(document)
    if not heads:
        raise InputError("the file has no attention weights in a trace (write one with --dump DIR)")
    plt = _pyplot()
    c = document["counterexample"]
    fig, axes = plt.subplots(len(heads), 3, figsize=(10, 2.6 * len(heads) + 0.6), dpi=110, squeeze=False)
    for row, (name, (fx, real)) in zip(axes, heads.items()):
        keys, queries = _axis_labels(c, *fx.shape)
        for ax, data, what, cmap, lim in ((row[0], fx, "FX", "viridis", (0, 1)), (row[1], real, "real", "viridis",
                                          (0, 1)), (row[2], fx - real, "FX - real", "coolwarm", None)):
            span = lim or (-max(1e-12, np.nanmax(np.abs(data))), max(1e-12, np.nanmax(np.abs(data))))
            im = ax.imshow(data, cmap=cmap, vmin=span[0], vmax=span[1], aspect="auto")
            ax.set_title(f"{name} {what}", fontsize=9)
            ax.set_xticks(range(len(keys)), keys, fontsize=7)
            ax.set_yticks(range(len(queries)), queries, fontsize=7)
            ax.set_xlabel("key")
            ax.set_ylabel("query position")
            if data.size <= 64:  # small enough to read every weight
                for (i, j), x in np.ndenumerate(data):
                    r, g, b, _ = im.cmap(im.norm(x))
                    ax.text(j, i, f"{x:.2g}", ha="center", va="center", fontsize=7,
                            color="black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white")
            fig.colorbar(im, ax=ax, fraction=0.046)
    dep = document.get("first_departure")
    fig.suptitle(f"{c['input']} -> {c['expected']} expected, {c['produced']} produced ({c['reason']})"
                 + (f"\nfirst departure of FX from real: {departure_text(dep)}" if dep else ""), fontsize=10)
    fig.tight_layout()
    return fig


def _axis_labels(cex: dict, n_queries: int, n_keys: int) -> tuple[list[str], list[str]]:
    """Keys named by their tokens (when the input's names split into one per key); queries by
    position (one row: the last position, the only one the readout reads)."""
    names = cex["input"].split()
    keys = [f"{j}:{w}" for j, w in enumerate(names)] if len(names) == n_keys else [str(j) for j in range(n_keys)]
    first = n_keys - n_queries
    return keys, [str(first + i) for i in range(n_queries)]


def save(fig, path: str | Path, fh: Optional[IO[bytes]] = None, force: bool = False) -> Path:
    """Write the figure as a new file (exclusive create), or into `fh`: the file `path`, created
    before the run that drew it (`files.new_file`)."""
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lower()[1:])
    _pyplot().close(fig)
    if fh is not None:
        fh.write(buf.getvalue())
        return path
    with new_file(path, binary=True, force=force) as out:
        out.write(buf.getvalue())
    return path


def svg_text(fig) -> str:
    """The figure as an inline SVG element (for the HTML report)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    _pyplot().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]
