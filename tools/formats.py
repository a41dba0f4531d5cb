"""The smallest format of each construction and Tracr library program: every format of FORMATS at
the sizes enumeration reaches, saved as docs/results/formats.json; the README's table and the full
page docs/results/formats.md render it (`tools.generated`).

    python3 -m tools.formats                          # every row, each run at most --timeout s
    python3 -m tools.formats --only equality,dyck22   # some rows (names: --help)
    python3 -m tools.formats --summary                # the README's table of the saved runs (runs nothing)

A construction's row runs N = its sizes in order; at each N every format is one run on the engine
`auto` picks (`runs.formats.format_table`), and the row ends after the first N where a run ended
unknown (the largest N it reached is the one before), or when its budget is spent.  FX(p*) is fixed
point at the construction's own p* at that N (f = p // 2, the smallest p that proves with every p
above it, scanned to P_MOST: `runs.sweep.descend`, verdicts through the verdict cache); FX(16, 8)
and FX(8, 4) are fixed point at the float formats' bits.  A Tracr program runs at its max-len,
FX(p*) at the p* of docs/results/tracr.md.  The smallest format is the first of the fixed formats
(all but FX(p*), which proves by its choice) that proves on the ladder of `FormatTable.ladder`
(fewer bits first, ties in the order of FORMATS); the format just below it holds its
counterexample (replayed, as every counterexample) or its coverage.  The cost of a format is its
run's time over FX(p*)'s at the row's largest N where both proved (a refuted run stops at its
counterexample).  The JSON file is this tool's output: it rewrites it, keeping what the tables
show (`saved`: each column's format description and each row group's construction parameters
once, small cells).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

from tools.transcripts import ROOT
from verifier.arithmetic import FixedPoint
from verifier.result import Result
from verifier.runs.cache import Cache, default_path
from verifier.runs.formats import FormatTable, format_table, smallest_label
from verifier.runs.sweep import descend
from verifier.support.budget import Deadline

PATH = "docs/results/formats.json"
P_STAR = "FX(p*)"
# names as --format takes them, or FX(p, f); FX(p*) is the row's own p at each N
FORMATS: dict[str, "str | FixedPoint | None"] = {
    "e4m3": "e4m3", "e5m2": "e5m2", "FX(8,4)": FixedPoint(8, 4), "bf16": "bf16", "fp16": "fp16",
    "FX(16,8)": FixedPoint(16, 8), P_STAR: None, "fp32": "fp32"}


@dataclass(frozen=True)
class Spec:
    name: str  # --only
    label: str  # the row, in the tables
    task: str  # a task name, or a Tracr program (lib:...)
    Ns: list[int]  # the sizes, in order (a Tracr program: its max-len)
    options: dict = field(default_factory=dict)  # task and construction options
    start: int = 8  # the first p of the scan for p* (a Tracr program: its p*, from docs/results/tracr.md)
    budget: float = 60  # seconds for the row's runs; no new N starts after it
    vocab: Optional[str] = None  # a Tracr program's vocabulary

    @property
    def tracr(self) -> bool:
        return self.vocab is not None


TRACR_P = 15  # docs/results/tracr.md: p* at f = p // 2 of every library program there
SPECS = [
    Spec("index-lookup", "index lookup", "index_lookup", [2, 4, 8, 16]),
    Spec("equality", "equality", "equality", [2, 4, 8, 16], start=3),
    Spec("disjointness", "disjointness", "disjointness", [2, 4, 8, 16], start=6),
    Spec("mqar", "MQAR", "mqar", [2, 4, 6], start=3),
    Spec("nearest-neighbour", "nearest neighbour", "nearest_neighbour", [2, 3, 4, 5]),
    Spec("induction-heads", "induction heads", "induction_heads", [2, 4, 6, 8, 10]),
    Spec("dyck22", "Dyck-(2,2) transformer", "dyck22", [2, 4, 6, 8], start=5),
    Spec("dyck22-recurrent", "Dyck-(2,2) recurrent", "dyck22", [2, 4, 6, 8], {"variant": "recurrent"}, start=3),
    Spec("composition", "composition, L = 2", "composition", [2, 3], {"depth": 2}, start=3),
    Spec("memorization", "memorization", "memorization", [2, 4, 6, 8]),
    Spec("icqa", "in-context QA", "icqa", [2, 3, 4]),
    Spec("template-matching", "template matching", "template_matching", [2, 4, 6, 8]),
    Spec("ictm", "in-context template matching", "ictm", [2]),
    *(Spec(f"tracr-{program[4:].replace('_', '-')}-{n}", f"Tracr `{program}`, max-len {n}", program, [n],
           start=TRACR_P, vocab=vocab)
      for program, vocab, n in [("lib:make_length", "a,b,c", 4), ("lib:make_hist", "a,b,c", 4),
                                ("lib:make_reverse", "a,b,c", 4), ("lib:make_sort_unique", "a,b,c,d", 4),
                                ("lib:make_shuffle_dyck2", "(,),{,}", 4)]),
]


def cell(r: Result, bits: int) -> dict:
    """One run, as the tables show it: the verdict, engine, coverage, time and the replayed
    counterexample (a tie among many answers cut to LONGEST characters: the run has them all)."""
    c = r.counterexamples[0] if r.counterexamples else None
    return {"verdict": r.verdict, "engine": r.engine, "format": r.arithmetic, "bits": bits, "covered": r.covered,
            "total": r.total, "seconds": round(r.seconds, 3), "reason": r.reason,
            "counterexample": _cut(c.line(), LONGEST) if c else None,
            "short": f"`{c.input}` ({c.reason}: expected {c.expected}, got {_cut(c.produced, 60)}"
                     f"{'' if c.position is None else f' at position {c.position}'})" if c else None}


LONGEST = 400


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most].rsplit(" ", 1)[0] + " ..."


def row(N: int, table: FormatTable, p_star: Optional[int]) -> dict:
    """The runs at N: every cell, p*, the smallest format and the one just below it."""
    smallest, below = table.smallest(N, among=[f for f in FORMATS if f != P_STAR])
    first = table.results[N, table.formats[0]]  # the construction of every cell (a float has no Kc)
    return {"N": N, "p_star": p_star, "smallest": smallest, "below": below, "params": first.params,
            "cells": {f: cell(table.results[N, f], table.bits[f]) for f in table.formats if (N, f) in table.results}}


def run(spec: Spec, timeout: float, cache: Optional[Cache]) -> dict:
    """The row group of one spec: a row per N run, and why it stopped."""
    clock = Deadline(spec.budget)
    rows, stop, top = [], None, spec.start
    model, task = None, spec.task
    if spec.tracr:
        from verifier.importers.tracr import compile_program
        compiled = compile_program(spec.task, spec.vocab.split(","), spec.Ns[0])
        model, task = compiled.model, compiled.task
    for N in spec.Ns:
        if clock.left() is not None and clock.left() <= 0:
            stop = f"the budget of {spec.budget:g} s ran out before N = {N}"
            break
        p_star = top if spec.tracr else _p_star(spec, N, top, timeout, cache)
        formats = {f: FixedPoint(p_star) if f == P_STAR else fmt for f, fmt in FORMATS.items()
                   if f != P_STAR or p_star is not None}
        table = format_table(task, [N], formats, model=model, timeout=timeout, **({} if spec.tracr else spec.options))
        rows.append(row(N, table, p_star))
        cells = " ".join(f"{f}={c['verdict'][0].upper()}" for f, c in rows[-1]["cells"].items())
        print(f"  {spec.name} N={N}: {cells}  smallest {rows[-1]['smallest']}", file=sys.stderr, flush=True)
        top = p_star or top
        if any(c["verdict"] == "unknown" for c in rows[-1]["cells"].values()):
            stop = f"a run at N = {N} ended unknown within {timeout:g} s"
            break
    return {"name": spec.name, "label": spec.label, "task": spec.task, "options": spec.options, "vocab": spec.vocab,
            "rows": rows, "stop": stop}


P_MOST = 24  # the largest p the scan for p* tries (a larger one overflows int64 in the widest sums)


def _p_star(spec: Spec, N: int, start: int, timeout: float, cache: Optional[Cache]) -> Optional[int]:
    """The construction's p* at N (f = p // 2), or None when the scan did not find it up to P_MOST
    within the timeout."""
    found = descend(spec.task, [N], start, most=P_MOST, timeout=timeout, cache=cache, **spec.options)
    return found.rows[0].p_star if found.rows else None


def cost(groups: list[dict]) -> dict:
    """Each format's time over FX(p*)'s, at each row's largest N where FX(p*) proved, for the formats
    that proved there too (both covered every input); and the median over the rows."""
    by_row = {}
    for g in groups:
        done = [r for r in g["rows"] if r["cells"].get(P_STAR, {}).get("verdict") == "proved"]
        if not done:
            continue
        cells = done[-1]["cells"]
        base = max(cells[P_STAR]["seconds"], 1e-3)
        by_row[g["label"]] = {"N": done[-1]["N"], **{f: round(c["seconds"] / base, 2) for f, c in cells.items()
                                                       if f != P_STAR and c["verdict"] == "proved"}}
    median = {f: round(statistics.median(v), 2) for f in FORMATS
              if (v := [r[f] for r in by_row.values() if f in r])}
    return {"baseline": P_STAR, "by_row": by_row, "median": median}


def _letters(g: dict, f: str) -> str:
    return " ".join(r["cells"][f]["verdict"][0].upper() if f in r["cells"] else "-" for r in g["rows"])


def summary(data: dict) -> str:
    """The README's table: a line per construction or program, the verdict letters of each format by N,
    the smallest format by N, and the counterexample (or coverage) of the format just below it at the
    largest N every run decided (when none proves: of the largest format); then the median cost
    against FX(p*)."""
    lines = [f"| construction or program | N | {' | '.join(FORMATS)} | smallest format by N | just below it, at the "
             f"largest N decided |", "|---|---|" + "---|" * len(FORMATS) + "---|---|"]
    for g in data["groups"]:
        if not g["rows"]:
            lines.append(f"| {g['label']} | - |" + " |" * len(FORMATS) + f" - | {g['stop']} |")
            continue
        last = _shown(g)
        below = last["below"]
        what = f"{below}: {_below(last['cells'][below])}" if below else "- (the cheapest proves)"
        lines.append(f"| {g['label']} | {', '.join(str(r['N']) for r in g['rows'])} | "
                     + " | ".join(_letters(g, f) for f in FORMATS)
                     + f" | {', '.join(map(_smallest, g['rows']))} | {what} |")
    med = data["cost"]["median"]
    lines += ["", "Median time against FX(p*) at each row's largest N, where both proved (every input): "
              + ", ".join(f"{f} {v:g}x" for f, v in med.items()) + "."]
    return "\n".join(lines)


def _shown(g: dict) -> dict:
    """The row whose format just below the smallest the README shows: the largest N every run decided."""
    decided = [r for r in g["rows"] if all(c["verdict"] != "unknown" for c in r["cells"].values())]
    return (decided or g["rows"])[-1]


def _smallest(r: dict) -> str:
    """The row's smallest format; ? when a cheaper run ended unknown, none when no fixed format proves."""
    return smallest_label(r["smallest"], r["cells"][r["below"]]["verdict"] if r["below"] else None)


def _below(c: dict) -> str:
    if c["verdict"] == "refuted":
        return c["short"]
    return f"{c['verdict']} ({c['covered']:,} of {c['total']:,} inputs)"


def _percent(c: dict) -> str:
    return f"{100 * c['covered'] / c['total']:.3g}%" if c["total"] else "-"


def page(data: dict) -> str:
    """The full page's tables: for each construction or program, every cell (verdict, engine, time;
    the coverage of an unknown), the smallest format, every counterexample (replayed), and the cost."""
    made = data["made_by"]
    out = [f"Made by `{made['command']}`: each run at most {made['timeout']:g} s on the engine `auto` picks; "
           f"{made['seconds']:g} s for the whole run. P proved, R refuted, U unknown.", ""]
    for g in data["groups"]:
        out += [f"### {g['label']}", ""]
        if g["options"]:
            out += ["Options: " + ", ".join(f"{k} = {v}" for k, v in g["options"].items()) + ".", ""]
        if g["vocab"]:
            out += [f"Vocabulary `{g['vocab']}`, compiled by Tracr.", ""]
        out += [f"| N | p* | {' | '.join(FORMATS)} | smallest |", "|---|---|" + "---|" * len(FORMATS) + "---|"]
        for r in g["rows"]:
            cells = [_cell(r["cells"][f]) if f in r["cells"] else "-" for f in FORMATS]
            out.append(f"| {r['N']} | {r['p_star'] or '-'} | {' | '.join(cells)} | {_smallest(r)} |")
        out.append("")
        if g["stop"]:
            out += [f"Stopped: {g['stop']}.", ""]
        engines = sorted({c["engine"] for r in g["rows"] for c in r["cells"].values()})
        out += [f"Engines: {', '.join(engines)}.", ""]
        found = [f"* N = {r['N']}, {f}: {c['counterexample']}" for r in g["rows"] for f, c in r["cells"].items()
                 if c.get("counterexample")]
        out += [*found, ""] if found else []
    out += ["### Cost against FX(p*)", "", "Time of each format's run over FX(p*)'s, at the row's largest N where "
            "both proved (every input covered):", "",
            f"| row | N | {' | '.join(f for f in FORMATS if f != P_STAR)} |",
            "|---|---|" + "---|" * (len(FORMATS) - 1)]
    for label, r in data["cost"]["by_row"].items():
        out.append(f"| {label} | {r['N']} | " + " | ".join(f"{r[f]:g}" if f in r else "-" for f in FORMATS
                                                           if f != P_STAR) + " |")
    med = data["cost"]["median"]
    out.append("| median | | " + " | ".join(f"{med[f]:g}" if f in med else "-" for f in FORMATS if f != P_STAR) + " |")
    return "\n".join(out).rstrip() + "\n"


def _cell(c: dict) -> str:
    engine = c["engine"].replace(" (auto)", "")
    unknown = f" {_percent(c)}" if c["verdict"] == "unknown" else ""
    return f"{c['verdict'][0].upper()}{unknown} {engine} {c['seconds']:.2g} s"


KEPT = ("verdict", "engine", "seconds", "covered", "total")  # every saved cell's; the rest only where shown
OWN = ("p", "f", "saturated_parameters")  # what a cell keeps of its format beyond its column's, when it has it


def saved(data: dict) -> dict:
    """The run as PATH keeps it: each column's format description once (what all its cells share)
    and each row group's construction parameters once (what all its rows share); in each row its
    own parameters (N, k, eta, ...), and in each cell what the tables show: verdict, engine, time,
    coverage, its own part of the format (FX(p*)'s p and f, the parameters that saturated, if any),
    the counterexample of a refuted run, and the short one only in the cell the README shows.
    `summary` and `page` render it as they render the run."""
    columns = {f: _common([c["format"] for g in data["groups"] for r in g["rows"] for name, c in r["cells"].items()
                           if name == f]) for f in data["formats"]}
    groups = []
    for g in data["groups"]:
        shown = _shown(g) if g["rows"] else None
        params = _common([r["params"] for r in g["rows"]])
        rows = [{**r, "params": {k: v for k, v in r["params"].items() if k not in params},
                 "cells": {f: _saved_cell(c, columns[f], r is shown and f == r["below"])
                           for f, c in r["cells"].items()}}
                for r in g["rows"]]
        groups.append({**{k: v for k, v in g.items() if k != "rows"}, "params": params, "rows": rows})
    return {**data, "formats": columns, "groups": groups}


def _common(described: list[dict]) -> dict:
    """The items every one of `described` has (equal as JSON: 1 is not true, -0.0 is not 0.0)."""
    return {k: v for k, v in described[0].items()
            if all(k in d and json.dumps(d[k]) == json.dumps(v) for d in described)} if described else {}


def _saved_cell(c: dict, column: dict, shown: bool) -> dict:
    own = {k: v for k, v in c["format"].items() if k in OWN and k not in column and v}
    return {**{k: c[k] for k in KEPT}, **({"format": own} if own else {}),
            **({"counterexample": c["counterexample"]} if c["counterexample"] else {}),
            **({"short": c["short"]} if shown and c["short"] else {})}


def save(data: dict) -> None:
    """Write `saved(data)` to PATH, with a line per cell and per row's parameters (a re-run's diff
    shows the cells that changed)."""
    kept = saved(data)
    lines = {}  # a placeholder string -> the compact JSON it stands for

    def line(value):
        lines[key := f"@{len(lines)}@"] = json.dumps(value, separators=(",", ":"))
        return key

    kept["formats"] = {f: line(d) for f, d in kept["formats"].items()}
    for g in kept["groups"]:
        g["params"] = line(g["params"])
        for r in g["rows"]:
            r["params"], r["cells"] = line(r["params"]), {f: line(c) for f, c in r["cells"].items()}
    text = json.dumps(kept, indent=1)
    for key, value in lines.items():
        text = text.replace(f'"{key}"', value, 1)
    (ROOT / PATH).write_text(text + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.formats", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=None, help="comma-separated names: " + ", ".join(s.name for s in SPECS))
    ap.add_argument("--timeout", type=float, default=4, help="seconds for each run (default 4)")
    ap.add_argument("--budget-scale", type=float, default=1.0, help="multiplies each row's budget")
    ap.add_argument("--no-cache", action="store_true", help="decide the scans for p* again")
    ap.add_argument("--summary", action="store_true", help="print the README's table of the saved runs; run nothing")
    args = ap.parse_args(argv)
    names = [s.name for s in SPECS]
    only = args.only.split(",") if args.only else names
    if set(only) - set(names):
        ap.error(f"unknown row {', '.join(sorted(set(only) - set(names)))}; known: {', '.join(names)}")
    if args.summary:
        print(summary(json.loads((ROOT / PATH).read_text())))
        return 0
    cache = None if args.no_cache else Cache(default_path())
    t0 = time.monotonic()
    groups = []
    for spec in (s for s in SPECS if s.name in only):
        t = time.monotonic()
        groups.append(run(Spec(**{**spec.__dict__, "budget": spec.budget * args.budget_scale}), args.timeout, cache))
        print(f"{spec.name}: N = {', '.join(str(r['N']) for r in groups[-1]['rows'])} "
              f"({time.monotonic() - t:.0f} s)", flush=True)
    data = {"formats": list(FORMATS), "groups": groups, "cost": cost(groups),
            "made_by": {"command": "python3 -m tools.formats" + (f" --only {args.only}" if args.only else ""),
                        "timeout": args.timeout, "seconds": round(time.monotonic() - t0, 1)}}
    save(data)
    print(summary(data))
    print(f"wrote {PATH} ({data['made_by']['seconds']:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
