"""Generated pages and regions: written from the code and from saved results, never by hand.

* docs/cli.md, the CLI reference, from the click group in cli.py (every command, its help, its
  options with their types and defaults);
* regions of the results pages between `<!-- generated: sweep docs/results/X.json -->` and
  `<!-- end generated -->`: the table of a saved sweep (`verify sweep ... -o X.json`), rendered by
  the same code as the sweep's own output, so a re-run sweep's file updates the page (a frontier
  of `python3 -m tools.frontiers` also says how it was run);
* `<!-- generated: formats docs/results/formats.json -->` (the README's table of the smallest format
  of each construction and Tracr program) and `<!-- generated: format_cells docs/results/formats.json -->`
  (every cell of it, docs/results/formats.md), from the saved run of `python3 -m tools.formats`.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

from tools.transcripts import DOCS, ROOT

CLI_PAGE = "docs/cli.md"
REGION = re.compile(r"(<!-- generated: (?P<kind>\w+) (?P<arg>\S+) -->\n)(?P<body>.*?)(<!-- end generated -->)",
                    re.DOTALL)


def cli_reference() -> str:
    """docs/cli.md from the click group."""
    import click

    from cli import cli

    ctx = click.Context(cli, info_name="verify")
    out = ["# CLI reference", "",
           "Generated from the click group in `cli.py` by `python3 -m tools.docs regenerate`; do not edit",
           "(a test fails when it is stale). Examples of each command with their output are in the",
           "[manual](README.md); exit codes: 0 proved, 1 refuted, 2 usage or input error, 3 unknown.", "",
           "| command | what it does |", "|---|---|"]
    names = sorted(cli.list_commands(ctx))
    for name in names:
        cmd = cli.get_command(ctx, name)
        out.append(f"| [`verify {name}`](#verify-{name}) | {_cell(_first_paragraph(cmd.help))} |")
    for name in names:
        cmd = cli.get_command(ctx, name)
        sub = click.Context(cmd, info_name=name, parent=ctx)
        out += ["", f"## verify {name}", "", "```text",
                f"Usage: verify {name} {' '.join(cmd.collect_usage_pieces(sub))}",
                "```", "", inspect.cleandoc(cmd.help or ""), ""]
        params = [p for p in cmd.get_params(sub) if isinstance(p, click.Option) and p.name != "help"]
        args = [p for p in cmd.get_params(sub) if isinstance(p, click.Argument)]
        if args:
            out.append("Arguments: " + ", ".join(f"`{a.human_readable_name}`" for a in args) + ".")
            out.append("")
        if params:
            out += ["| option | value | default | meaning |", "|---|---|---|---|"]
            for p in params:
                value = "flag" if p.is_flag else _cell(_metavar(p, sub))
                default = "" if p.is_flag or callable(p.default) or p.default is None or p.default == () \
                    or type(p.default).__name__ == "Sentinel" else p.default
                out.append(f"| `{', '.join(p.opts + p.secondary_opts)}` | {value} | {_cell(str(default))} "
                           f"| {_cell(p.help or '')} |")
    return "\n".join(out).rstrip() + "\n"


def _metavar(p, ctx) -> str:
    try:  # click >= 8.2 takes the context
        metavar = p.type.get_metavar(p, ctx)
    except TypeError:
        metavar = p.type.get_metavar(p)
    return metavar or p.type.name.upper()


def _first_paragraph(text: str | None, limit: int = 160) -> str:
    first = " ".join(inspect.cleandoc(text or "").split("\n\n")[0].split())
    return first if len(first) <= limit else first[:limit].rsplit(" ", 1)[0] + " ..."


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def sweep_table(path: str) -> str:
    """The markdown table of a saved sweep, as `verify sweep` prints it."""
    from verifier.runs.sweep import Frontier

    data = json.loads((ROOT / path).read_text())
    made = data.get("made_by")  # a frontier of `python3 -m tools.frontiers`: how it was run
    budget = f"a budget of {made['budget']:g} s" if made and made["budget"] is not None else "every run of the grid"
    quick = made and made.get("quick_timeout")
    per_run = (f"at most {quick:g} s per run, then {made['timeout']:g} s for the runs left unknown" if quick
               else f"at most {made['timeout']:g} s per run" if made else "")
    note = (f"\n\nMade by `{made['command']}`: {per_run}, {budget}, N to "
            f"{made['max_N']}, engine {made['engine']}; {made['seconds']:g} s" if made else "")
    return Frontier.from_json(data).to_markdown() + note + "\n"


def frontier_summary(names: str) -> str:
    """One compact table of saved frontiers (`tools.frontiers.summary`), named comma-separated."""
    from tools.frontiers import SPECS, summary

    specs = {s.name: s for s in SPECS}
    unknown = [n for n in names.split(",") if n not in specs]
    if unknown:
        raise ValueError(f"no frontier named {', '.join(unknown)} in tools.frontiers.SPECS")
    return summary([specs[n] for n in names.split(",")]) + "\n"


def format_summary(path: str) -> str:
    """The table of the smallest formats (`tools.formats.summary`) of a saved `python3 -m tools.formats`."""
    from tools.formats import summary

    return summary(json.loads((ROOT / path).read_text())) + "\n"


def format_cells(path: str) -> str:
    """Every cell of a saved `python3 -m tools.formats` (`tools.formats.page`)."""
    from tools.formats import page

    return page(json.loads((ROOT / path).read_text()))


RENDERERS = {"sweep": sweep_table, "frontiers": frontier_summary, "formats": format_summary,
             "format_cells": format_cells}


def render_regions(text: str) -> str:
    return REGION.sub(lambda m: m.group(1) + "\n" + RENDERERS[m.group("kind")](m.group("arg")) + "\n" + m.group(5),
                      text)


def expected() -> dict[Path, str]:
    """Every generated file's text as it should be."""
    pages = {ROOT / CLI_PAGE: cli_reference()}
    for doc in DOCS:
        path = ROOT / doc
        if path in pages:
            continue
        text = path.read_text()
        if REGION.search(text):
            pages[path] = render_regions(text)
    return pages


def stale() -> list[str]:
    return [str(p.relative_to(ROOT)) for p, text in expected().items() if not p.exists() or p.read_text() != text]


def regenerate() -> list[str]:
    changed = []
    for path, text in expected().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(str(path.relative_to(ROOT)))
    return changed
