"""Counterexample dumps and readable traces.

A dump is one JSON file per counterexample: the input, the expected and the produced answer, the
arithmetic and construction, and the full trace of the input: every intermediate in codes and in
decimals, with the value the unquantized model (float64) computes beside it, so that a reader can
see which rounding broke it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

from .errors import InputError
from .result import Counterexample, Result, finite_or_none

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


def _list(a):
    return None if a is None else np.asarray(a).tolist()


def trace_json(table: dict) -> dict:
    return {name: {"shape": list(np.shape(v["codes"])), "codes": _list(v["codes"]), "values": _list(v["values"]),
                   "real": _list(v["real"])} for name, v in table.items()}


def first_departure(table: dict, f: Optional[int] = None, step: Optional[float] = None) -> Optional[dict]:
    """The first intermediate, in evaluation order, where the value in the format (FX: of fractional
    bits f; another grid: of step `step`) is more than one step from the real one (more than a single
    rounding explains), or the real value is not finite: its name, the element, both values and the
    gap in steps.  None when the format follows throughout."""
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
            return {"name": name, "element": [int(i) for i in at], "fx": float(fx[at]),
                    "real": finite_or_none(real[at]), "gap_steps": finite_or_none(gap[at] / step)}
    return None


def counterexample_document(result: Result, cex: Counterexample) -> dict:
    return {"verdict": result.verdict, "task": result.task, "construction": result.construction,
            "params": result.params, "arithmetic": result.arithmetic, "engine": result.engine,
            "provenance": result.provenance,
            "counterexample": cex.to_json(), "first_departure": first_departure(cex.trace, step=result.arithmetic["step"]),
            "how_to_read": HOW_TO_READ, "trace": trace_json(cex.trace),
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
        try:
            fh = open(path, "x")
        except FileExistsError:  # mkstemp creates a new name atomically: it never runs out
            fd, name = tempfile.mkstemp(prefix=f"{stem}-cex{cex.index}-", suffix=".json", dir=directory)
            fh, path = os.fdopen(fd, "w"), Path(name)
        with fh:
            fh.write(text)
        written.append(path)
    return written


def format_tag(a: dict) -> str:
    """The format in a file name: p12 (FX), b2-Kc2, grid-1_144-144."""
    kind = a.get("format", "fx")
    if kind == "fx":
        return f"p{a['p']}"
    if kind == "b2":
        return f"b2-Kc{a['Kc']}"
    return f"grid-{a['step_exact']}-{a['range_exact'][1]}".replace("/", "_")


def format_trace(table: dict) -> str:
    """The trace as text: each intermediate, row by row, FX value with the real value beside it."""
    lines = []
    for name, v in table.items():
        vals = np.atleast_2d(np.asarray(v["values"], dtype=float))
        real = None if v["real"] is None else np.atleast_2d(np.asarray(v["real"], dtype=float))
        lines.append(f"{name}  shape {tuple(np.shape(v['codes']))}")
        for i, row in enumerate(vals):
            fx = " ".join(f"{x:g}" for x in row)
            lines.append(f"  [{i}] fx   {fx}")
            if real is not None:
                lines.append(f"  [{i}] real " + " ".join(f"{x:.4g}" for x in real[i]))
    return "\n".join(lines)
