"""The docs' one command: `python3 -m tools.docs regenerate` rewrites every transcript's output
(README.md and docs/**/*.md), the CLI reference (docs/cli.md) and the generated parts of the results
pages, in place.  `--fast` leaves the transcripts marked slow alone, `--slow` runs only those;
FILES limits it to some docs.
`python3 -m tools.docs check` says what is stale without running transcripts (the test suite runs
them: tests/test_docs.py).  How it works: docs/testing-the-docs.md.
"""

from __future__ import annotations

import argparse
import sys
import time

from tools import generated, transcripts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tools.docs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    regen = sub.add_parser("regenerate", help="rewrite transcripts' outputs and generated pages in place")
    which = regen.add_mutually_exclusive_group()
    which.add_argument("--fast", action="store_true", help="skip the transcripts marked slow")
    which.add_argument("--slow", action="store_true", help="only the transcripts marked slow")
    regen.add_argument("--no-transcripts", action="store_true", help="only the generated pages")
    regen.add_argument("--line", type=int, action="append",
                       help="only the block whose fence is on this line (repeatable)")
    regen.add_argument("files", nargs="*", help="docs to regenerate (default: README.md and docs/**/*.md)")
    sub.add_parser("check", help="list generated pages that are stale (no transcript is run)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    if args.command == "check":
        stale = generated.stale()
        for path in stale:
            print(f"stale: {path} (python3 -m tools.docs regenerate)")
        return 1 if stale else 0
    for path in generated.regenerate():
        print(f"{path}: rewritten")
    changed = 0
    if not args.no_transcripts:
        for doc in args.files or transcripts.DOCS:
            changed += transcripts.regenerate(doc, slow=not args.fast, fast=not args.slow,
                                                lines=set(args.line) if args.line else None)
    print(f"{changed} transcript(s) rewritten in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
