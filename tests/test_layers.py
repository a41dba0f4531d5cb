"""The verifier's layers (docs/developing.md): a module imports from its own group and from the layers
below it, never from a layer above or from another group of its own layer.  Every import counts, a
lazy one inside a function too: a wrong-way import is a cycle waiting to happen."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Bottom first.  Each layer is a list of groups; a group is a package or a list of modules.
LAYERS: list[tuple[str, dict[str, tuple[str, ...]]]] = [
    ("support", {"support": ("verifier.support",)}),
    ("numbers", {"arithmetic": ("verifier.arithmetic", "verifier.floats", "verifier.int8")}),
    ("data", {"model": ("verifier.model",), "result": ("verifier.result", "verifier.verdicts"),
              "tasks": ("verifier.tasks",)}),
    ("evaluation", {"modelfile": ("verifier.modelfile",),
                    "evaluation": ("verifier.evaluator", "verifier.exact", "verifier.layer0",
                                   "verifier.locality", "verifier.calibration")}),
    ("builders", {"constructions": ("verifier.constructions",), "smt": ("verifier.smt",)}),
    ("engines", {"engines": ("verifier.engines",), "importers": ("verifier.importers",)}),
    ("runs", {"runs": ("verifier.runs",)}),
    ("outputs", {"outputs": ("verifier.outputs",)}),
    ("refute", {"refute": ("verifier.refute",)}),
    ("errata", {"errata": ("verifier.errata",)}),
    ("public API", {"api": ("verifier",)}),  # verifier/__init__.py: re-exports from every layer
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "verifier").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def place(module: str) -> tuple[int, str]:
    """(layer index, group) of a module: the group whose package or module is its longest prefix."""
    best = None
    for rank, (_, groups) in enumerate(LAYERS):
        for group, prefixes in groups.items():
            for p in prefixes:
                if (module == p or module.startswith(p + ".") and p != "verifier") and (
                        best is None or len(p) > best[2]):
                    best = (rank, group, len(p))
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_layers.py and to the "
                             f"layer list of docs/developing.md")
    return best[0], best[1]


def imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, module imported) for every import of a verifier module in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "verifier"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "verifier":
                continue
            for a in node.names:  # `from . import budget` imports the module verifier.support.budget
                found.append((node.lineno, f"{target}.{a.name}" if f"{target}.{a.name}" in known else target))
    return found


def wrong_way(modules: dict[str, Path]) -> list[tuple[Path, int, str]]:
    """(file, line, what is wrong) for every import that points up the layers or across groups."""
    known = set(modules)
    bad = []
    for module, path in modules.items():
        rank, group = place(module)
        for line, target in imports(module, path, known):
            t_rank, t_group = place(target)
            if t_rank > rank or (t_rank == rank and t_group != group):
                bad.append((path, line, f"{module} ({LAYERS[rank][0]} layer, {group}) imports {target} "
                                        f"({LAYERS[t_rank][0]} layer, {t_group})"))
    return bad


def test_no_import_points_up_the_layers():
    bad = wrong_way(_modules())
    assert not bad, "imports that point up the layers (docs/developing.md):\n" + "\n".join(
        f"{path.relative_to(ROOT)}:{line}: {text}" for path, line, text in bad)


def test_an_upward_import_is_named(tmp_path):
    modules = _modules()
    evaluator = tmp_path / "evaluator.py"  # the evaluator, with a lazy import of the runs layer added
    source = modules["verifier.evaluator"].read_text()
    evaluator.write_text(source + "\n\ndef _later():\n    from .runs.api import explain\n")
    modules["verifier.evaluator"] = evaluator
    assert [(line, text) for path, line, text in wrong_way(modules) if path == evaluator] == [
        (source.count("\n") + 4, "verifier.evaluator (evaluation layer, evaluation) imports verifier.runs.api "
                                  "(runs layer, runs)")]


def test_every_module_has_a_layer_and_every_group_its_place_in_the_guide():
    for module in _modules():
        place(module)
    guide = (ROOT / "docs" / "developing.md").read_text()
    for _, groups in LAYERS[:-1]:
        for prefixes in groups.values():
            for p in prefixes:
                path = p.replace(".", "/")
                assert f"{path}/" in guide or f"{path}.py" in guide, f"docs/developing.md does not place {path}"
