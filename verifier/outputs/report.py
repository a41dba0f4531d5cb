"""The HTML report: one self-contained file (no script, no link, no resource outside it) that a
person can open or mail.

It reads what the commands write: a verdict (`--json`), a counterexample dump (`--dump DIR`), or a
sweep (`verify sweep -o X.json`), and shows the verdict with its arithmetic and provenance; for a
sweep, the frontier figure (inline SVG, when matplotlib is installed) and its table; for a
counterexample, its trace with the first intermediate where FX departs from the real value marked,
and each head's attention weights, FX beside real, as heatmaps.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Optional

import numpy as np

from ..runs.fit import fit
from ..support.errors import InputError
from ..support.schema import parse_json, read_text, validate
from .dump import aligned, departure_text, first_departure, row_names

KINDS = ("verdict", "dump", "sweep")
COLORS = {"proved": "#1a7f37", "refuted": "#cf222e", "unknown": "#9a6700"}
CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:72em;color:#1f2328;padding:0 1em}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
.verdict{display:inline-block;color:#fff;font-weight:700;padding:.2em .7em;border-radius:.3em;font-size:1.3em}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #d0d7de;padding:.15em .5em;text-align:left;
vertical-align:top;font-size:.85em} th{background:#f6f8fa}
.num{font-family:ui-monospace,monospace;white-space:pre-wrap}
tr.departure td{background:#fff1e5;border-color:#d1242f}
.heat td{width:2.6em;height:1.6em;text-align:center;font-family:ui-monospace,monospace;font-size:.75em;padding:0}
.heats{display:flex;gap:2em;flex-wrap:wrap} .note{color:#59636e;font-size:.85em}
"""


def _obj(required: list, **properties) -> dict:
    """An object with these keys (others allowed: a newer verify may write more than a report reads)."""
    return {"type": "object", "required": required, "properties": properties}


def _maybe(schema: dict) -> dict:
    """The schema, or null."""
    return {**schema, "type": [schema["type"], "null"]}


_STR, _INT, _NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}
_NAMES = {"type": "array", "items": _STR}
_COUNTEREXAMPLE = _obj(["input", "expected", "produced", "reason", "margin"], input=_STR, expected=_STR,
                       produced=_STR, reason=_maybe(_STR), margin=_maybe(_NUM), position=_maybe(_INT),
                       real_produced=_maybe(_STR), real_margin=_maybe(_NUM), overflow_at=_NAMES,
                       saturated_at=_NAMES)
_COUNTEREXAMPLE["dependentRequired"] = {"real_produced": ["real_margin"]}
_TRACE = {"type": "object", "additionalProperties": _obj(["values", "real"], values={"type": "array"},
                                                         real=_maybe({"type": "array"}))}
_RUN = {"verdict": {"enum": ["proved", "refuted", "unknown"]}, "task": {"type": "object", "properties": {"name": _STR}},
        "construction": _maybe({"type": "object", "properties": {"construction": _STR, "variant": _maybe(_STR),
                                                                   "theorem": _maybe(_STR)}}),
        "params": _maybe({"type": "object"}), "provenance": _maybe({"type": "object"}),
        "arithmetic": {"type": "object", "properties": {"step": {"type": "number", "exclusiveMinimum": 0}}},
        "engine": _STR, "trace": _maybe(_TRACE), "residual_rows": _maybe(_NAMES)}
# What the report and `verify plot` read of each document the commands write: a file that is not
# one of them, or breaks one of these types, is refused with one line (a field and what it expected).
SCHEMAS = {
    "verdict": {**_obj(["verdict", "task", "arithmetic", "engine", "inputs", "seconds", "status"], **_RUN,
                       inputs=_obj(["covered", "total"], covered={**_INT, "minimum": 0}, total={**_INT, "minimum": 0},
                                   checked=_maybe({**_obj(["inputs"], inputs=_INT, positions=_maybe(_INT),
                                                          of_positions=_maybe(_INT)),
                                                   "if": {"required": ["positions"], "properties": {"positions": _INT}},
                                                   "then": {"required": ["of_positions"],
                                                            "properties": {"of_positions": _INT}}})),
                       seconds=_NUM, status=_STR, reason=_maybe(_STR), min_margin=_maybe(_NUM),
                       tightest=_maybe(_obj(["input"], input=_STR)),
                       counterexamples={"type": "array", "items": _COUNTEREXAMPLE}),
                "if": {"required": ["trace"], "properties": {"trace": {"type": "object"}}},
                "then": {"properties": {"arithmetic": {"required": ["step"]}}}},
    "dump": _obj(["verdict", "task", "arithmetic", "counterexample", "trace"], **{**_RUN, "trace": _TRACE},
                 counterexample=_COUNTEREXAMPLE, inputs=_maybe(_obj(["covered", "total"], covered=_INT, total=_INT)),
                 first_departure=_maybe(_obj(["name", "element", "fx", "real", "gap_steps"], name=_STR,
                                             element={"type": "array", "items": {**_INT, "minimum": 0}}, fx=_NUM,
                                             real=_maybe(_NUM), gap_steps=_maybe(_NUM), at=_STR)),
                 quantized_weights=_maybe({"type": "object", "additionalProperties": _obj(
                     ["shape", "codes"], shape={"type": "array", "items": _INT}, codes={"type": "array"})})),
    "sweep": _obj(["task", "arithmetic", "rows"], task=_STR, arithmetic={"type": "object", "properties": {"f": _STR}},
                  construction=_maybe({"type": "object"}), partial=_maybe(_STR), ran_on=_maybe(_STR),
                  fit=_maybe({**_obj([], slope=_maybe(_NUM), intercept=_maybe(_NUM)),
                              "if": {"required": ["slope"], "properties": {"slope": _NUM}},
                              "then": {"required": ["intercept"], "properties": {"intercept": _NUM}}}),
                  rows={"type": "array", "items": _obj(
                      ["N", "p_star", "verdicts"], N={**_INT, "minimum": 1}, p_star=_maybe(_INT),
                      verdicts={"type": "object", "additionalProperties": {"enum": ["proved", "refuted", "unknown"]}},
                      ruled_out_by=_maybe(_STR), ruled_out_reason=_maybe(_STR))}),
}


def kind_of(doc) -> Optional[str]:
    """Which document the commands write this is, by its keys (None: none of them)."""
    if isinstance(doc, dict):
        if "rows" in doc and "fit" in doc:
            return "sweep"
        if "counterexample" in doc and "trace" in doc:
            return "dump"
        if "verdict" in doc and "inputs" in doc:
            return "verdict"
    return None


def load(path: str | Path) -> tuple[str, dict]:
    """A document the commands write, and its kind (one of KINDS), checked against its schema
    (`SCHEMAS`) and its trace's numbers read, so that a malformed file is an input error here,
    not a failure while the report is drawn."""
    source = f"result file {path}"
    doc = parse_json(read_text(Path(path), "result file"), source, allow_nan=True)  # a trace's real values may be
    kind = kind_of(doc)                                                              # inf or NaN
    if kind is None:
        raise InputError(f"{path}: not a verdict (--json), a counterexample dump (--dump) or a sweep (sweep -o X.json)")
    validate(doc, SCHEMAS[kind], f"{source} ({kind})")
    for name, v in (doc.get("trace") or {}).items():
        values = _numbers(v["values"], f"{source}: trace.{name}.values")
        if v.get("real") is not None and _numbers(v["real"], f"{source}: trace.{name}.real").shape != values.shape:
            raise InputError(f"{source}: trace.{name}: 'real' and 'values' have different shapes")
    return kind, doc


def _numbers(x, where: str) -> np.ndarray:
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{where}: expected a (nested) array of numbers of one shape") from None


def _e(x) -> str:
    return html.escape(str(x))


def _table(rows: list[tuple], header: Optional[tuple] = None) -> str:
    head = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table>{head}{body}</table>"


def _badge(verdict: str) -> str:
    return (f'<span class="verdict" id="verdict" style="background:{COLORS.get(verdict, "#59636e")}">'
            f"{_e(verdict.upper())}</span>")


def _arithmetic(a: dict) -> str:
    keys = ["format", "source", "N", "Kc", "p", "f", "storage", "E", "M", "ieee", "max", "tiny", "softmax", "step",
            "step_exact", "range", "range_exact", "codes",
            "code_count", "bits", "rounding", "overflow", "accumulate", "quantization_error", "saturated_parameters"]
    return _table([(_e(k), f'<span class="num">{_e(a[k])}</span>') for k in keys if k in a])


def _heading(doc: dict, title: str) -> str:
    c = doc.get("construction") or {}
    task = doc.get("task") or {}
    what = (f"{_e(c.get('construction', '?'))}" + (f" ({_e(c['variant'])})" if c.get("variant") else "")
            + (f", {_e(c['theorem'])}" if c.get("theorem") else ""))
    size = ", ".join(f"{_e(k)}={_e(v)}" for k, v in task.items() if k not in ("name", "inputs")) \
        if isinstance(task, dict) else _e(task)
    task_name = task.get("name", "") if isinstance(task, dict) else task
    out = [f"<h1>{_e(title)}</h1>", f"<p>{_badge(doc['verdict'])}" if "verdict" in doc else "<p>",
           f" <b>{what}</b> on task <b>{_e(task_name)}</b> {size}</p>"]
    pv = doc.get("provenance") or {}
    if pv:
        out.append("<h2>What was verified</h2>" + _table([(_e(k), f'<span class="num">{_e(v)}</span>')
                                                          for k, v in pv.items()]))
    return "".join(out)


def _verdict_section(doc: dict) -> str:
    return "<h2>Arithmetic</h2>" + _arithmetic(doc["arithmetic"]) + "<h2>Run</h2>" + _table(_run_rows(doc))


def _run_rows(doc: dict) -> list[tuple]:
    """The run of a verdict or of a dump (whose run stopped at its counterexamples): the engine, the
    inputs covered and checked, the construction's parameters (eta, d, k, ...)."""
    inputs = doc.get("inputs")
    rows = [("engine", _e(doc.get("engine", "?")))]
    if inputs is not None:  # a dump written before it recorded its run's coverage has none
        rows.append(("inputs covered", f"{inputs['covered']:,} of {inputs['total']:,}"))
    rows += [(key, _e(doc[key])) for key in ("seconds", "status") if key in doc]
    checked = (inputs or {}).get("checked") or {}
    if "inputs" in checked:  # members without an answer are covered, not checked; so are positions
        rows.insert(2, ("inputs checked", f"{checked['inputs']:,}" + (
            f"; {checked['positions']:,} of their {checked['of_positions']:,} positions judged"
            if checked.get("positions") is not None else "")))
    if doc.get("min_margin") is not None:
        rows.append(("min margin", _e(doc["min_margin"]) + (f" at {_e(doc['tightest']['input'])}"
                                                            if doc.get("tightest") else "")))
    if doc.get("reason"):
        rows.append(("unknown because", _e(doc["reason"])))
    params = ", ".join(f"{_e(k)}={_e(v)}" for k, v in (doc.get("params") or {}).items())
    rows.append(("parameters", params or "-"))
    return rows


def _counterexample(c: dict) -> str:
    rows = [("input", f'<span class="num">{_e(c["input"])}</span>'), ("expected", _e(c["expected"])),
            ("produced", _e(c["produced"])), ("reason", _e(c["reason"])), ("margin", _e(c["margin"]))]
    if c.get("position") is not None:
        rows.append(("first failing position", _e(c["position"])))
    if c.get("real_produced") is not None:
        rows.append(("the unquantized model answers", f"{_e(c['real_produced'])} (margin {_e(c['real_margin'])})"))
    if c.get("overflow_at"):
        rows.append(("overflow at", _e(", ".join(c["overflow_at"]))))
    if c.get("saturated_at"):
        rows.append(("values saturated at", _e(", ".join(c["saturated_at"]))))
    return "<h2>Counterexample</h2>" + _table(rows)


def _trace(trace: dict, departure: Optional[dict], rows: Optional[list[str]] = None) -> str:
    """The trace table; with the model's residual row names, each intermediate of the residual stream
    has a header row of them, its columns aligned."""
    out = []
    element = departure["element"] if departure else []
    marked_row = element[0] if len(element) >= 2 else 0  # a vector is shown as one row
    for name, v in trace.items():
        fx = np.atleast_2d(np.asarray(v["values"], dtype=float))
        real = None if v.get("real") is None else np.atleast_2d(np.asarray(v["real"], dtype=float))
        hit = departure is not None and departure["name"] == name
        fx_cells = [_cells(r.tolist()) for r in fx]
        real_cells = [["-"] if real is None else _cells(real[i].tolist()) for i in range(len(fx))]
        names = row_names(name, fx.shape, rows)
        if names is not None:  # pad FX and real columns alike under the names
            lines = aligned([names] + fx_cells + [c for c in real_cells if c != ["-"]])
            head, lines = lines[0], lines[1:]
            fx_text, real_text = lines[:len(fx)], lines[len(fx):] or ["-"] * len(fx)
            out.append(f'<tr class="names"><td>{_e(name)} rows</td><td class="num">{_e(head)}</td>'
                       f'<td class="num">{_e(head if real is not None else "")}</td></tr>')
        else:
            fx_text, real_text = [" ".join(c) for c in fx_cells], [" ".join(c) for c in real_cells]
        for i in range(len(fx)):
            attrs = ' class="departure" id="first-departure"' if hit and i == marked_row \
                else (' class="departure"' if hit else "")
            out.append(f"<tr{attrs}><td>{_e(name)}{f' [{i}]' if len(fx) > 1 else ''}</td>"
                       f'<td class="num">{_e(fx_text[i])}</td><td class="num">{_e(real_text[i])}</td></tr>')
    head = "<tr><th>intermediate</th><th>FX value</th><th>real (float64, unquantized)</th></tr>"
    where = ("<p>First departure (the format's value more than one step of the grid from the real value): "
             f"<b>{_e(departure_text(departure))}</b>: FX {_e(departure['fx'])}, "
             f"real {_e(departure['real'])}, {_e(round(departure['gap_steps'] or 0, 2))} steps apart "
             f'(<a href="#first-departure">marked below</a>).</p>' if departure else
             "<p>FX stays within one step of the real value at every intermediate.</p>")
    return "<h2>Trace</h2>" + where + f"<table>{head}{''.join(out)}</table>"


def _cells(values) -> list[str]:
    return [f"{x:.4g}" if isinstance(x, float) and math.isfinite(x) else str(x) for x in values]


def _heat(data: np.ndarray, title: str) -> str:
    cells = []
    for r in np.atleast_2d(data):
        cells.append("<tr>" + "".join(
            f'<td style="background:rgba(31,111,235,{min(1.0, max(0.0, float(x))):.3f});'
            f'color:{"#fff" if x > 0.55 else "#1f2328"}" title="{x:.6g}">{x:.2f}</td>' for x in r) + "</tr>")
    return f'<div><div class="note">{_e(title)}</div><table class="heat">{"".join(cells)}</table></div>'


def _attention(trace: dict) -> str:
    from .plots import attention_heads  # numpy only: no matplotlib needed for the heatmaps here
    heads = attention_heads({"trace": trace})
    if not heads:
        return ""
    parts = ["<h2>Attention weights</h2><p class='note'>rows: query positions; columns: key positions; "
             "hover a cell for its value.</p>"]
    for name, (fx, real) in heads.items():
        parts.append(f"<h3>{_e(name)}</h3><div class='heats'>{_heat(fx, 'FX')}{_heat(real, 'real')}</div>")
    return "".join(parts)


def _weights(weights: dict) -> str:
    if not weights:
        return ""
    rows = [(_e(name), _e(w["shape"]), f'<span class="num">{_e(json.dumps(w["codes"]))}</span>')
            for name, w in weights.items()]
    return ("<h2>Quantized weights</h2><details><summary>the codes the run used (value = code &times; the "
            "step: 2<sup>-f</sup> in FX)</summary>" + _table(rows, ("weight", "shape", "codes")) + "</details>")


def _frontier_figure(doc: dict) -> str:
    try:
        from .plots import frontier_figure, require_matplotlib, svg_text
        require_matplotlib()
    except InputError:
        return "<p class='note'>(install matplotlib, verify[plot], for the figure)</p>"
    return f"<div>{svg_text(frontier_figure([doc]))}</div>"


def _sweep(doc: dict) -> str:
    rows = []
    for r in doc["rows"]:
        verdicts = " ".join(f"{p}{v[0].upper()}" for p, v in r["verdicts"].items())
        rows.append((_e(r["N"]), f"{math.log2(r['N']):.2f}", _e(r["p_star"] if r["p_star"] is not None else "-"),
                     f'<span class="num">{_e(r.get("ruled_out_by") or "-")}</span> '
                     f'{_e(r.get("ruled_out_reason") or "")}',
                     f'<span class="num">{_e(verdicts)}</span>'))
    x = doc.get("over", "p")  # p, or k (a sweep of T's width)
    found = fit([(r["N"], r["p_star"]) for r in doc["rows"] if r["p_star"] is not None])
    fit_text = "".join(f"<p>{_e(line)}</p>" for line in found.to_markdown(doc.get("int_bits"), f"{x}*")) \
        if found else ""
    partial = f"<p><b>PARTIAL:</b> {_e(doc['partial'])}</p>" if doc.get("partial") else ""
    return ("<h2>Arithmetic</h2>" + _arithmetic(doc["arithmetic"]) + "<h2>Frontier</h2>" + _frontier_figure(doc)
            + _table(rows, ("N", "log2 N", f"{x}*", f"ruled out at {x}*-1 by", f"verdicts by {x}")) + fit_text + partial
            + (f"<p class='note'>ran on {_e(doc['ran_on'])}</p>" if doc.get("ran_on") else ""))


def render(kind: str, doc: dict, source: str = "") -> str:
    """The report of a document of `kind` as one HTML page."""
    if kind == "sweep":
        title = f"Precision frontier: {doc['task']}"
        body = _heading({**doc, "task": {"name": doc["task"]}}, title) + _sweep(doc)
    else:
        title = f"verify: {doc['verdict']} on {doc['task'].get('name', '')}"
        body = _heading(doc, title)
        if kind == "verdict":
            body += _verdict_section(doc)
            cexs = doc.get("counterexamples") or []
            if cexs:
                body += _counterexample(cexs[0])
            if doc.get("trace"):
                step, rows = doc["arithmetic"]["step"], doc.get("residual_rows")
                body += (_trace(doc["trace"], first_departure(doc["trace"], rows=rows, step=step), rows)
                         + _attention(doc["trace"]))
        else:
            body += "<h2>Arithmetic</h2>" + _arithmetic(doc["arithmetic"]) + "<h2>Run</h2>" + _table(_run_rows(doc))
            body += _counterexample(doc["counterexample"])
            body += (_trace(doc["trace"], doc.get("first_departure"), doc.get("residual_rows"))
                     + _attention(doc["trace"]))
            body += _weights(doc.get("quantized_weights") or {})
    foot = f"<p class='note'>made by verify from {_e(source)}</p>" if source else ""
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body>{body}{foot}</body></html>")

