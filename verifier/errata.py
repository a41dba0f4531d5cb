"""The errata report: each printed construction against its corrected version, for the papers of
Bhattamishra et al. 2024 (arXiv:2406.09347), Chen and Zou 2024 (arXiv:2404.01601) and Sanford, Hsu,
Telgarsky 2024b (arXiv:2402.09268).

For every claim, at the given sizes: the printed (``paper``) variant's verdict, with its first
counterexample written as a dump file; the ``corrected`` variant's verdict (none where the printed
construction is the only one, being correct); and for each variant
the smallest p of a range at which it is proved (at that p and every larger p of the range, as in
`sweep`).  A printed variant that cannot be built is reported as such, with the reason.  Every
verdict comes from an engine run; nothing in the table is written by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .api import prove
from .dump import write_dumps
from .errors import UnbuildableError
from .papers import BHATTAMISHRA_2024, CHEN_ZOU_2024, SANFORD_HSU_TELGARSKY_2024B, Paper
from .sweep import p_star
from .tasks import flag


@dataclass(frozen=True)
class Claim:
    claim: str  # what the paper states, and where
    task: str
    N: int
    options: dict = field(default_factory=dict)  # task options
    paper_variant: str = "paper"
    paper: Paper = BHATTAMISHRA_2024
    corrected: Optional[str] = "corrected"  # None: the printed construction is the only one
    p: Optional[int] = None  # the claim's own precision and p* range, where the report's do not fit it
    p_range: Optional[range] = None


CLAIMS = [
    Claim("Thm 6 / F.2: equality, N not a power of 2", "equality", 6),
    Claim("Thm 6 / F.2: equality, N not a power of 2", "equality", 12),
    Claim("Thm 6 / F.2: equality, N a power of 2", "equality", 16),
    Claim("Thm 13 / F.3: disjointness", "disjointness", 12),
    Claim("Thm 13 / F.3: sparse threshold, one shared g", "sparse_threshold", 10, {"shared_g": True}),
    Claim("Thm 13 / F.3: sparse threshold, g by position", "sparse_threshold", 10),
    Claim("Thm 7 / G.2: nearest neighbour, d' = 2", "nearest_neighbour", 4),
    Claim("Thm 7 / G.2: nearest neighbour, K(z_2i) = [0, -2.3, T(2i)]", "nearest_neighbour", 4, {},
          "literal"),
    Claim("Thm 7 / G.2: MQAR, 3 symbols", "mqar", 6),
    Claim("Thm 1 / Lemmas 3-4: memorization, all 64 sequences of length 3 over 4 tokens", "memorization", 3,
          {"alphabet": 4}, paper=CHEN_ZOU_2024),
    Claim("Thm 3 / 13.2: in-context QA, k = 3, nq = na = 4", "icqa", 3, {"nq": 4, "na": 4}, paper=CHEN_ZOU_2024,
          corrected=None),
    Claim("Thm 5 / 14.2: template matching, all 5 templates of length 3", "template_matching", 3,
          paper=CHEN_ZOU_2024),
    Claim("Thm 6 / 15: in-context template matching, k = 2, l = 2", "ictm", 2, {"length": 2},
          paper=CHEN_ZOU_2024),
    Claim("Thm 4.2 / Lemma D.2: induction heads, angle spacing N", "induction_heads", 6, {"sigma": 4},
          "sht-printed", SANFORD_HSU_TELGARSKY_2024B, "sht", p=24, p_range=range(16, 29)),
]


@dataclass
class Side:
    verdict: str  # proved | refuted | unknown | cannot be built
    detail: str = ""  # the counterexample, or why it cannot be built
    dump: Optional[str] = None
    p_star: Optional[int] = None


@dataclass
class Row:
    claim: Claim
    p: int
    paper: Side
    corrected: Side


def _side(claim: Claim, variant: Optional[str], p: int, ps: list[int], dump_dir: Optional[Path], engine: str,
          timeout: Optional[float]) -> Side:
    if variant is None:
        return Side("n/a", "the printed construction is the only one")
    run = dict(N=claim.N, engine=engine, timeout=timeout, variant=variant, **claim.options)
    try:
        result = prove(claim.task, p=p, **run)
    except UnbuildableError as exc:
        return Side("cannot be built", str(exc).split(": ", 1)[-1])
    side = Side(result.verdict)
    if result.counterexamples:
        c = result.counterexamples[0]
        side.detail = f"{c.input} -> {c.claim}"
        if dump_dir is not None:
            side.dump = str(write_dumps(result, dump_dir)[0])
    verdicts = {q: (result.verdict if q == p else prove(claim.task, p=q, **run).verdict) for q in ps}
    side.p_star = p_star(verdicts)
    return side


def run_errata(p: int = 12, ps: Optional[list[int]] = None, dump_dir: Optional[str] = None,
               engine: str = "auto", timeout: Optional[float] = None, claims: Optional[list[Claim]] = None,
               progress: Optional[Callable[[str], None]] = None) -> list[Row]:
    ps = list(range(4, 17)) if ps is None else ps
    directory = Path(dump_dir) if dump_dir else None
    rows = []
    for claim in claims or CLAIMS:
        cp, cps = claim.p or p, list(claim.p_range) if claim.p_range else ps
        rows.append(Row(claim, cp, _side(claim, claim.paper_variant, cp, cps, directory, engine, timeout),
                        _side(claim, claim.corrected, cp, cps, directory, engine, timeout)))
        if progress:
            progress(f"{claim.claim} N={claim.N}: paper {rows[-1].paper.verdict}, corrected {rows[-1].corrected.verdict}")
    return rows


def to_markdown(rows: list[Row]) -> str:
    ps = "p* (paper / corrected)"
    lines = [f"| paper | claim | task | N | printed variant | counterexample file | corrected | {ps} |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.claim
        opts = "".join(f" {flag(k)}" + ("" if v is True else f" {v}") for k, v in c.options.items())
        if r.paper.verdict == "cannot be built":
            paper = f"cannot be built ({c.paper_variant}): {r.paper.detail.split('. ')[0]}"
        else:
            paper = f"{r.paper.verdict} at p={r.p}" + (f": `{r.paper.detail}`" if r.paper.detail else "")
        corrected = "none (the printed one is correct)" if r.corrected.verdict == "n/a" else \
            f"{r.corrected.verdict} at p={r.p}"
        star = f"{_p(r.paper.p_star, r.paper.verdict)} / {_p(r.corrected.p_star, r.corrected.verdict)}"
        lines.append(f"| {c.paper.short} | {c.claim} | {c.task}{opts} | {c.N} | {paper} | {r.paper.dump or '-'} | "
                     f"{corrected} | {star} |")
    return "\n".join(lines)


def _p(p_star: Optional[int], verdict: str) -> str:
    if verdict in ("cannot be built", "n/a"):
        return "n/a"
    return str(p_star) if p_star is not None else "none in range"


def to_json(rows: list[Row]) -> list[dict]:
    return [{"paper": r.claim.paper.cite(r.claim.claim.split(":")[0]), "claim": r.claim.claim, "task": r.claim.task,
             "N": r.claim.N, "options": r.claim.options, "p": r.p,
             "printed": vars(r.paper) | {"variant": r.claim.paper_variant}, "corrected": vars(r.corrected)}
            for r in rows]
