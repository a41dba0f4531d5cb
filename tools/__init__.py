"""Developer tools that sit above the CLI: the docs machinery (transcripts, generated pages)."""
