"""The import graph between packages (DESIGN.md: ``cli -> report -> domain -> run -> errors``):
no cycle, no upward edge. Read from the source with ``ast``, lazy imports inside functions
included, so a deferred import cannot hide an edge."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "trainmedic"
#: Leaves anything may import, and the top-level facade (which lazily re-exports the parts).
LEAVES = {"errors", "_version", "basis", "numbers"}
TOP = "(top)"


def _graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> ["file:line", ...]."""
    edges: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts == ("__main__.py",):
            continue  # `python -m trainmedic`: the command line's other entry point
        pkg = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else TOP
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != "trainmedic":
                    continue
                target = parts[1] if len(parts) > 1 else TOP
                if target != pkg:
                    edges[pkg][target].append(f"{rel}:{node.lineno}")
    return edges


def test_nothing_imports_the_cli_and_only_the_cli_imports_report() -> None:
    bad = []
    for pkg, targets in _graph().items():
        if pkg == "cli":
            continue
        for target, where in targets.items():
            if target == "cli" or (target == "report" and pkg != TOP):
                bad.append(f"{pkg} -> {target} ({where[0]})")
    assert not bad, bad


def test_no_package_imports_the_facade() -> None:
    # parts read the version from trainmedic._version: the facade's lazy names point back
    # into the parts, so an import of it from a part would be a cycle
    bad = [f"{pkg} ({where[0]})" for pkg, t in _graph().items() if pkg != TOP
           for target, where in t.items() if target == TOP]
    assert not bad, bad


def test_no_cycle_between_packages() -> None:
    g = {p: {t for t in ts if t not in LEAVES and t != TOP}
         for p, ts in _graph().items() if p != TOP}
    seen: dict[str, int] = {}

    def visit(p: str, path: list[str]) -> None:
        if seen.get(p) == 1:
            raise AssertionError(f"import cycle: {' -> '.join(path + [p])}")
        if seen.get(p) == 2:
            return
        seen[p] = 1
        for t in sorted(g.get(p, ())):
            visit(t, path + [p])
        seen[p] = 2

    for p in sorted(g):
        visit(p, [])


def test_design_edges() -> None:
    # DESIGN.md: checkpoint/ does not need diagnose/ (it takes a trusted_before callable);
    # recipe/ owns the loop and its resume test, checkpoint/ the bytes; run/ only errors
    g = _graph()
    assert not {"diagnose", "recipe", "live"} & set(g["checkpoint"]), dict(g["checkpoint"])
    assert set(g["run"]) <= LEAVES, dict(g["run"])
    assert set(g["diagnose"]) <= LEAVES | {"run"}, dict(g["diagnose"])


def test_basis_is_defined_once() -> None:
    # the findings and the memory ledger say "measured / estimated / not checked" with one type
    from trainmedic.basis import Basis
    from trainmedic.diagnose.finding import Basis as FindingBasis
    from trainmedic.memory.ledger import Basis as LedgerBasis

    assert FindingBasis is Basis and LedgerBasis is Basis
    defs = [p for p in SRC.rglob("*.py") if "\nBasis = " in p.read_text()]
    assert [p.relative_to(SRC).as_posix() for p in defs] == ["basis.py"]


def test_no_module_over_600_lines() -> None:
    # a module is a noun, about one thing: past ~600 lines it is two
    long = {p.relative_to(SRC).as_posix(): n for p in SRC.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_cli_modules_stay_thin() -> None:
    # cli/ parses, calls the library and hands the result to report/: about 200 lines at most
    long = {p.name: n for p in (SRC / "cli").glob("*.py")
            if (n := len(p.read_text().splitlines())) > 200}
    assert not long, long
