"""Counterexample dumps and readable traces.

A dump is one JSON file per counterexample: the input, the expected and the produced answer, the
arithmetic and construction, and the full trace of the input: every intermediate in codes and in
decimals, with the value the unquantized model (float64) computes beside it, so that a reader can
see which rounding broke it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Optional

import numpy as np

from ..result import Counterexample, Result, finite_or_none
from ..support.errors import InputError
from ..support.files import new_file

HOW_TO_READ = (
    "trace: the forward pass of this input, in evaluation order. For each intermediate: 'codes' are "
    "the integer codes of the format (FX: FX(p, f); otherwise the grid of 'arithmetic'), 'values' = codes * "
    "step (arithmetic.step; 2^-f in FX), 'real' = the same quantity in the unquantized "
    "model computed in float64. Names: embed (token + position), L<l>.H<h>.q/k/v (query, key, value "
    "rows; the last layer's query only at the last position unless the readout reads every position), "
    ".logits <q,k>, .max (M), .exp (R(exp(s - M))), .Z (sum of exp, exact), .attn (R(e/Z)), .out (head "
    "output), L<l>.heads, L<l>.attn_out (after W_O), L<l>.resid, L<l>.ffn_hidden, L<l>.ffn_out, L<l>.out, "
    "readout.scores (one row per position read). A recurrent model: Wh (W h_{t-1} + b per step), h "
    "(the state after each step). 'position' in the counterexample is the first position that fails. "
    "counterexample.saturated_at: every intermediate where a value left the range and was clamped "
    "(under either overflow rule; overflow_at lists those that fail the input under overflow = error). "
    "first_departure: the first intermediate where the format's value is more than one step from the real "
    "value (more than one rounding explains), with the element and the gap in steps. quantized_weights: the "
    "weight codes the run used (value = code * step), under the model file's names.")
RESIDUAL = re.compile(r"^(embed|L\d+\.(attn_out|resid|ffn_out|out))$")  # intermediates of the residual stream


def row_names(name: str, shape, rows: Optional[list[str]]) -> Optional[list[str]]:
    """The residual rows' names along the last axis of intermediate `name`, when it is one of the
    residual stream and the model names its rows; else None (the rows keep their indices)."""
    if rows is None or not RESIDUAL.match(name) or not len(shape) or shape[-1] != len(rows):
        return None
    return list(rows)


def _list(a):
    return None if a is None else np.asarray(a).tolist()


def trace_json(table: dict) -> dict:
    return {name: {"shape": list(np.shape(v["codes"])), "codes": _list(v["codes"]), "values": _list(v["values"]),
                   "real": _list(v["real"])} for name, v in table.items()}


def first_departure(table: dict, f: Optional[int] = None, rows: Optional[list[str]] = None,
                    step: Optional[float] = None) -> Optional[dict]:
    """The first intermediate, in evaluation order, where the value in the format (FX: of fractional
    bits f; another grid: of step `step`) is more than one step from the real one (more than a single
    rounding explains), or the real value is not finite: its name, the element, both values and the
    gap in steps; with the model's residual row names `rows`, the element's row name ('row') and
    where it is ('at': ``L0.out[m]``).  None when the format follows throughout."""
    step = 2.0 ** -f if step is None else float(step)
    for name, v in table.items():
        if v["real"] is None:
            continue
        fx = np.asarray(v["values"], dtype=np.float64)
        real = np.asarray(v["real"], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            gap = np.where(np.isfinite(real), np.abs(fx - real), np.inf)
        if gap.size and gap.max() > step:
            at = np.unravel_index(int(np.argmax(gap > step)), gap.shape)
            found = {"name": name, "element": [int(i) for i in at], "fx": float(fx[at]),
                     "real": finite_or_none(real[at]), "gap_steps": finite_or_none(gap[at] / step)}
            names = row_names(name, gap.shape, rows)
            if names is not None:
                found.update(row=names[at[-1]], at=f"{name}[{names[at[-1]]}]")
            return found
    return None


def departure_text(dep: dict) -> str:
    """A departure in words: ``L0.out[m] at element [5, 7]`` (or the bare element without row names)."""
    return f"{dep.get('at', dep['name'])} at element {dep['element']}"


def counterexample_document(result: Result, cex: Counterexample) -> dict:
    return {"verdict": result.verdict, "task": result.task, "construction": result.construction,
            "params": result.params, "arithmetic": result.arithmetic, "engine": result.engine,
            "provenance": result.provenance, "inputs": result.inputs_json(),
            "counterexample": cex.to_json(),
            "first_departure": first_departure(cex.trace, rows=result.residual_rows, step=result.arithmetic["step"]),
            "how_to_read": HOW_TO_READ, "residual_rows": result.residual_rows, "trace": trace_json(cex.trace),
            "quantized_weights": {name: {"shape": list(np.shape(c)), "codes": _list(c)}
                                  for name, c in result.quantized.items()}}


def prepare_dump_dir(directory: str | Path) -> Path:
    """Create the dump directory if needed and check that it can be written, before a run."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"--dump {directory}: exists and is not a directory") from None
    except OSError as exc:
        raise InputError(f"--dump {directory}: cannot create the directory ({exc.strerror})") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"--dump {directory}: the directory is not writable")
    return directory


def write_dumps(result: Result, directory: str | Path, extra: dict | None = None) -> list[Path]:
    """One new file per counterexample; an existing file is never overwritten.  The name is
    TASK[-VARIANT]-N..-p..-cexINDEX.json, and when that exists, the same with a unique suffix.
    `extra` adds keys to every document (a refutation's argument and certificate)."""
    directory = prepare_dump_dir(directory)
    written = []
    variant = result.params.get("variant")
    task = result.task
    size = task.get("N", task.get("k", task.get("length", "")))  # the tasks of Chen and Zou name N after the paper
    stem = f"{task['name']}{'-' + variant if variant else ''}-N{size}-{format_tag(result.arithmetic)}"
    for cex in result.counterexamples:
        text = json.dumps(counterexample_document(result, cex) | (extra or {}), indent=1)
        path = directory / f"{stem}-cex{cex.index}.json"
        while os.path.lexists(path):  # a name of its own, beside the earlier dumps
            path = directory / f"{stem}-cex{cex.index}-{secrets.token_hex(4)}.json"
        with new_file(path) as fh:
            fh.write(text)
        written.append(path)
    return written


def format_tag(a: dict) -> str:
    """The format in a file name: p12 (FX), b2-Kc2, grid-1_144-144, bf16-fp32acc, int8-per-channel."""
    kind = a.get("format", "fx")
    if kind == "fx":
        return f"p{a['p']}"
    if kind == "float":
        return f"{a['storage']}-{a['accumulate']}acc".replace(":", "_")
    if kind == "b2":
        return f"b2-Kc{a['Kc']}"
    if kind == "int8":
        return f"int8-{a['weights']}"
    return f"grid-{a['step_exact']}-{a['range_exact'][1]}".replace("/", "_")


def aligned(lines: list[list[str]]) -> list[str]:
    """Rows of cells, each column padded to its widest cell (for a monospaced table)."""
    widths = [max(len(line[j]) for line in lines) for j in range(len(lines[0]))]
    return [" ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines]


def format_trace(table: dict, rows: Optional[list[str]] = None, step: Optional[float] = None) -> str:
    """The trace as text: each intermediate, row by row, the value in the format with the real value
    beside it.  With the model's residual row names `rows`, the intermediates of the residual stream
    get a header of them, columns aligned; with the format's `step`, the first departure comes first."""
    lines = []
    if step is not None:
        dep = first_departure(table, rows=rows, step=step)
        lines.append("first departure (the format more than one step from real): " + (
            f"{departure_text(dep)}, fx {dep['fx']:g}, real {dep['real']}" if dep else "none"))
    for name, v in table.items():
        vals = np.atleast_2d(np.asarray(v["values"], dtype=float))
        real = None if v["real"] is None else np.atleast_2d(np.asarray(v["real"], dtype=float))
        lines.append(f"{name}  shape {tuple(np.shape(v['codes']))}")
        names = row_names(name, vals.shape, rows)
        body = []
        for i, row in enumerate(vals):
            body.append([f"  [{i}] fx  "] + [f"{x:g}" for x in row])
            if real is not None:
                body.append([f"  [{i}] real"] + [f"{x:.4g}" for x in real[i]])
        if names is None:
            lines += [" ".join(cells) for cells in body]
        else:
            lines += aligned([["  rows    "] + names] + body)
    return "\n".join(lines)
