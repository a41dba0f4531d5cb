"""Console transcripts in the README and docs/*.md: found, run, compared, regenerated.

A transcript is a fenced block whose info string is `console`:

    ```console
    $ verify idxl --N 16 --p 12
    PROVED: ...
    ```

Each `$ ` line is a command, run by bash in a fresh scratch directory (a copy of docs/ and specs/
without the figures, which the docs' own commands draw,
so relative paths in the docs work and nothing the command writes lands in the repository), with
`verify` meaning this checkout's cli.py; the lines after it, up to the next `$ `, are its output:
stdout, and stderr too when the command fails (exit 2: its one-line error, exit 3 before a
verdict), since on success stderr carries only progress and notes that vary between runs.
`$ echo $?` prints the previous command's exit code.  Outputs are compared after `normalise`
(durations, rates, scratch paths).  Every transcript is a pytest `slow` test (a new process each:
outside the fast tier, in CI's full run).  Words after `console` mark the block: `slow` (more than
a few seconds: `regenerate --fast` skips it), `long` (minutes: pytest's `long` mark too, so CI's run
leaves it out; `python3 -m pytest -m long tests/test_docs.py` or a regeneration runs it) and
`example` (shown, not run: output that cannot be reproduced on demand, such as
a Ctrl-C or a benchmark's timings; use sparingly) and `stderr` (show stderr on success too,
interleaved with stdout: for a note that belongs to the output, like `verify tracr`'s compile line).

Sybil finds the blocks (its Markdown fenced-block lexer gives each block's text and offsets, and its
Document/Example model gives line numbers and an evaluator per block): the doc tests need only the
evaluator below, and regeneration writes outputs back at the offsets Sybil reports.  pytest-examples
checks Python code blocks only, and cram/prysk read their own `.t` files, not Markdown.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from sybil import Document, Region
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parent.parent
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
MARKS = {"slow", "long", "example", "stderr"}
COMMAND_TIMEOUT = 1800  # seconds: a transcript that runs longer is broken, not slow

LEXER = RawFencedCodeBlockLexer(info_pattern=re.compile(r"console(?P<marks>[ \w-]*)$\n", re.MULTILINE))

# What varies between runs of the same command and is not part of what the docs claim.
NORMALISE = [
    (re.compile(r"\b(\d+ min )?\d+(\.\d+)? s\b"), "<T> s"),  # durations: "in 2.70 s", "about 1 min 40 s"
    (re.compile(r"\b(seconds=)\d+(\.\d+)?"), r"\1<T>"),
    (re.compile(r"\b[\d,]+(\.\d+)?/s\b"), "<rate>/s"),
]


# The optional extras a command needs (pyproject.toml), by what it says: a transcript that needs one
# that is not installed is skipped, as the extras' own tests are.
EXTRAS = [
    (re.compile(r"verify tracr|shift_by\.py|--program "), "tracr", "tracr"),
    (re.compile(r"--plot\b|verify plot\b"), "matplotlib", "plot"),
    (re.compile(r"--(scheduler|cluster) local|VERIFY_DASHBOARD"), "distributed", "dask"),
    (re.compile(r"--solver (bitwuzla|portfolio)"), "bitwuzla", "solvers"),
    (re.compile(r"--solver cvc5"), "cvc5", "solvers"),
    (re.compile(r"\.pth?\b"), "torch", "torch"),
]


def missing_extras(transcript: "Transcript") -> list[str]:
    """The extras (pyproject.toml names) the transcript's commands need and this Python lacks."""
    text = "\n".join(step.command for step in transcript.steps)
    return sorted({extra for pattern, module, extra in EXTRAS
                   if pattern.search(text) and importlib.util.find_spec(module) is None})


class TranscriptError(Exception):
    """A transcript's command that cannot be shown as output (it ended in a traceback)."""


@dataclass
class Step:
    command: str
    lines: list[str]  # its output as written in the doc

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Transcript:
    steps: list[Step]
    marks: frozenset[str]
    source_start: int  # the block's lines in the document: from after the opening fence's line
    source_end: int  # to the start of the closing fence's line
    indent: str = ""  # the fence's indentation (a block inside a list item), on every line

    @property
    def slow(self) -> bool:
        return "slow" in self.marks or self.long

    @property
    def long(self) -> bool:
        return "long" in self.marks

    @property
    def example(self) -> bool:
        return "example" in self.marks

    def render(self, outputs: list[str]) -> str:
        """The block's text with these outputs (one per step)."""
        lines = []
        for step, out in zip(self.steps, outputs):
            lines.append(f"$ {step.command}")
            if out:
                lines += out.split("\n")
        return "".join(f"{self.indent}{line}\n" if line else "\n" for line in lines)


def parse_steps(text: str) -> list[Step]:
    steps: list[Step] = []
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append(Step(line[2:], []))
        elif not steps:
            raise ValueError(f"a console block must start with a `$ ` command line, not {line!r}")
        else:
            steps[-1].lines.append(line)
    return steps


def normalise(text: str) -> str:
    for pattern, replacement in NORMALISE:
        text = pattern.sub(replacement, text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def parse_document(document: Document) -> Iterator[Region]:
    """Sybil parser: one region per console block, evaluated by `check`."""
    for region in LEXER(document):
        source = region.lexemes["source"]
        marks = frozenset(region.lexemes["marks"].split())
        unknown = marks - MARKS
        if unknown:
            raise ValueError(f"{document.path}: unknown console mark(s) {sorted(unknown)}; known: {sorted(MARKS)}")
        # Sybil strips a list item's indentation from the source; the raw span keeps it, so that
        # regeneration writes the block back in place.
        text = document.text
        start = region.start + source.offset
        end = text.rindex("\n", start - 1, region.end) + 1  # the closing fence's line starts here
        fence = text[region.start:text.index("\n", region.start)]
        indent = fence[:len(fence) - len(fence.lstrip())]
        region.parsed = Transcript(parse_steps(str(source)), marks, start, end, indent)
        region.evaluator = check
        yield region


def load(path: str | Path) -> Document:
    return Document.parse(str(Path(path) if Path(path).is_absolute() else ROOT / path), parse_document)


def transcripts(path: str | Path) -> list[tuple[int, Transcript]]:
    """(line, transcript) for every console block of one doc."""
    return [(example.line, example.parsed) for example in load(path).examples()]


class Scratch:
    """A scratch directory holding copies of docs/ and specs/ and a `verify` that runs this checkout."""

    def __enter__(self) -> "Scratch":
        self.dir = tempfile.mkdtemp(prefix="verify-docs-")
        for name in ("docs", "specs"):  # figures left out: the docs' commands that draw them write them
            shutil.copytree(ROOT / name, Path(self.dir, name), ignore=shutil.ignore_patterns("*.png", "*.svg"))
        bindir = Path(self.dir, ".bin")
        bindir.mkdir()
        shim = bindir / "verify"
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{ROOT / "cli.py"}" "$@"\n')
        shim.chmod(0o755)
        self.env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "100",
                    "XDG_CACHE_HOME": str(Path(self.dir, ".cache")), "VERIFY_SCHEDULER": "serial"}
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, transcript: Transcript) -> list[str]:
        """Each step's output as the doc shows it: the scratch directory's path made relative."""
        outputs, rc = [], 0
        for step in transcript.steps:
            if step.command.strip() == "echo $?":
                outputs.append(str(rc))
                continue
            merged = "stderr" in transcript.marks  # stderr interleaved, as a terminal shows it
            proc = subprocess.run(["bash", "-c", step.command], cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                                  text=True, timeout=COMMAND_TIMEOUT)
            rc = proc.returncode
            if "Traceback (most recent call last)" in proc.stdout + (proc.stderr or ""):
                # never written into a doc, whatever the exit code (a helper script's ImportError is 1)
                raise TranscriptError(f"`$ {step.command}` ended in a traceback:\n{proc.stdout}{proc.stderr or ''}")
            out = proc.stdout + (proc.stderr if not merged and rc not in (0, 1) else "")
            out = out.replace(self.dir + "/", "").replace(self.dir, ".")
            outputs.append("\n".join(line.rstrip() for line in out.split("\n")).strip("\n"))
        return outputs


def check(example) -> Optional[str]:
    """Sybil evaluator: None when every step's output matches the doc, else a diff."""
    transcript: Transcript = example.parsed
    if transcript.example:
        return None
    with Scratch() as scratch:
        got = scratch.run(transcript)
    for step, out in zip(transcript.steps, got):
        want, out = normalise(step.output), normalise(out)
        if out != want:
            diff = "\n".join(difflib.unified_diff(want.split("\n"), out.split("\n"), "doc", "run", lineterm=""))
            return (f"{example.path}:{example.line}: `$ {step.command}` printed something else "
                    f"(python3 -m tools.docs regenerate rewrites it):\n{diff}")
    return None


def regenerate(path: str | Path, *, slow: bool = True, fast: bool = True, lines: Optional[set[int]] = None,
               log=print) -> int:
    """Run every non-example console block of one doc and write its outputs back, one block at a
    time (an interrupted regeneration keeps what it finished); the number of blocks changed."""
    doc_path = Path(path) if Path(path).is_absolute() else ROOT / path
    name = doc_path.relative_to(ROOT) if doc_path.is_relative_to(ROOT) else doc_path
    changed = 0
    for index, (line, transcript) in enumerate(transcripts(doc_path)):
        if transcript.example or (transcript.slow and not slow) or (not transcript.slow and not fast) \
                or (lines is not None and line not in lines):
            continue
        if missing := missing_extras(transcript):
            log(f"{name}:{line}: skipped (install the extra(s) {', '.join(missing)})")
            continue
        t0 = time.monotonic()
        with Scratch() as scratch:
            outputs = scratch.run(transcript)
        seconds = time.monotonic() - t0
        note = "" if transcript.slow or seconds < SLOW_SECONDS else f"  (over {SLOW_SECONDS} s: mark it slow)"
        text = doc_path.read_text()
        current = transcripts(doc_path)[index][1]  # offsets as the file is now
        new = current.render(outputs)
        if normalise(new) != normalise(text[current.source_start:current.source_end]):
            doc_path.write_text(text[:current.source_start] + new + text[current.source_end:])
            changed += 1
            log(f"{name}:{line}: rewritten ({seconds:.1f} s){note}")
        else:
            log(f"{name}:{line}: unchanged ({seconds:.1f} s){note}")
    return changed


SLOW_SECONDS = 5  # a transcript longer than this is marked slow
