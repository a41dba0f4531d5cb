"""The docs cannot drift: every console transcript in README.md and docs/**/*.md is run and its
output compared (tools/transcripts.py: Sybil finds the blocks), the generated pages must equal
what the code generates now, and every `$ ` command line sits in a console block.
Regenerate what fails with `python3 -m tools.docs regenerate` (docs/testing-the-docs.md)."""

from __future__ import annotations

import pytest

from tools import generated, transcripts


def _examples():
    for doc in transcripts.DOCS:
        for example in transcripts.load(doc).examples():
            # every transcript is a new process (about a second each): none is in the fast tier
            marks = [pytest.mark.slow] + ([pytest.mark.long] if example.parsed.long else [])
            if example.parsed.example:
                marks.append(pytest.mark.skip(reason="marked example: shown, not run"))
            elif missing := transcripts.missing_extras(example.parsed):
                marks.append(pytest.mark.skip(reason=f"needs the extra(s) {', '.join(missing)}"))
            yield pytest.param(example, id=f"{doc}:{example.line}", marks=marks)


@pytest.mark.parametrize("example", list(_examples()))
def test_transcript(example):
    example.evaluate()  # Sybil raises SybilFailure with the diff when an output differs


@pytest.mark.parametrize("path", sorted(generated.expected(), key=str),
                         ids=lambda p: str(p.relative_to(transcripts.ROOT)))
def test_generated_page_is_current(path):
    assert path.read_text() == generated.expected()[path], \
        f"{path.relative_to(transcripts.ROOT)} is stale: python3 -m tools.docs regenerate --no-transcripts"


def test_every_command_line_is_in_a_console_block():
    stray = []
    for doc in transcripts.DOCS:
        fence, quoted = None, False
        for number, line in enumerate((transcripts.ROOT / doc).read_text().split("\n"), 1):
            text = line.strip()
            if text.startswith("````"):  # a block that shows Markdown source: not commands
                quoted = not quoted
            elif quoted:
                continue
            elif text.startswith("```"):
                fence = None if fence is not None else text
            elif text.startswith("$ ") and not (fence or "").startswith("```console"):
                stray.append(f"{doc}:{number}: {text[:60]}")
    assert not stray, "command lines outside a ```console block (never compared):\n" + "\n".join(stray)


def test_a_drifted_output_fails(tmp_path):
    """The comparison itself: a doc whose output was edited fails with a diff; the real output passes."""
    doc = tmp_path / "drift.md"
    doc.write_text("```console\n$ verify list --help\nUsage: nothing like it\n```\n")
    (example,) = transcripts.load(doc).examples()
    with pytest.raises(Exception, match="printed something else"):
        example.evaluate()
    transcripts.regenerate(doc, log=lambda *_: None)
    (example,) = transcripts.load(doc).examples()
    example.evaluate()
    assert "Usage: cli.py list" in doc.read_text() or "Usage: verify list" in doc.read_text()


def test_normalise_removes_what_varies_between_runs():
    a = "inputs 1,364 of 1,364 covered by engine exhaustive (auto) in 0.01 s\n  dependent   seconds=0.336\n441,893/s"
    b = "inputs 1,364 of 1,364 covered by engine exhaustive (auto) in 1 min 2.50 s\n  dependent   seconds=12\n5/s"
    assert transcripts.normalise(a) == transcripts.normalise(b)
    assert transcripts.normalise("1,364 of 1,364") != transcripts.normalise("1,365 of 1,364")


def test_relative_links_resolve():
    """Every relative link of the README and the manual names a file that exists (pages moved
    into docs/ keep working), and every #anchor a heading of that page."""
    import re

    broken = []
    for doc in transcripts.DOCS:
        path = transcripts.ROOT / doc
        text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{doc}: {target}")
            elif anchor and dest.suffix == ".md":
                headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                            for h in re.findall(r"^#+ (.*)$", dest.read_text(), flags=re.MULTILINE)}
                if anchor not in headings:
                    broken.append(f"{doc}: {target} (no such heading)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_block_is_written_back_in_place():
    """Regeneration rewrites a block from its steps: rendering each block's own outputs must give
    its text back byte for byte (indentation inside list items included), or a regeneration would
    move or mangle it."""
    for doc in transcripts.DOCS:
        text = (transcripts.ROOT / doc).read_text()
        for line, transcript in transcripts.transcripts(doc):
            raw = text[transcript.source_start:transcript.source_end]
            assert transcript.render([step.output for step in transcript.steps]) == raw, f"{doc}:{line}"


def test_a_traceback_is_never_an_output(tmp_path):
    """A command that ends in a traceback fails the test and is not written back, whatever its exit code."""
    doc = tmp_path / "trace.md"
    text = "```console\n$ python3 -c 'import no_such_module_here'\n```\n"
    doc.write_text(text)
    (example,) = transcripts.load(doc).examples()
    with pytest.raises(transcripts.TranscriptError, match="ended in a traceback"):
        example.evaluate()
    with pytest.raises(transcripts.TranscriptError):
        transcripts.regenerate(doc, log=lambda *_: None)
    assert doc.read_text() == text


def test_a_transcript_that_needs_a_missing_extra_is_skipped(tmp_path, monkeypatch):
    """Without tracr (or matplotlib, dask, the solvers), the transcripts that use it skip, as the
    extras' own tests do, and regeneration leaves them as they are."""
    import importlib.util
    doc = tmp_path / "extra.md"
    text = "```console\n$ verify tracr lib:make_length --vocab a,b --max-len 3 --p 8\nnot run\n```\n"
    doc.write_text(text)
    (example,) = transcripts.load(doc).examples()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tracr" else real(name, *a))
    assert transcripts.missing_extras(example.parsed) == ["tracr"]
    transcripts.regenerate(doc, log=lambda *_: None)
    assert doc.read_text() == text
