"""Rules of citeflow's source layout: no import cycles, citeflow never leans on its own test
support, and modules of a readable size.

The import graph is grimp's: every ``import`` in ``src/citeflow``, those inside functions and
under ``TYPE_CHECKING`` included, so a cycle cannot hide behind a function-level import.
"""

from __future__ import annotations

import graphlib
import itertools
import re
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "citeflow"

#: lines a module may have without saying why
MAX_LINES = 400
#: how a longer module says why, in its first 20 lines
REASON = re.compile(r"longer than \d+ lines because \S", re.IGNORECASE)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("citeflow", cache_dir=None)


def _how_imported(graph: grimp.ImportGraph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    where = "; ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
    return f"{importer} imports {imported} ({where})"


def test_citeflow_has_no_import_cycle(graph: grimp.ImportGraph) -> None:
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as error:
        cycle: list[str] = error.args[1]  # [a, ..., a]: each one is imported by the one before
        steps = [_how_imported(graph, b, a) for a, b in itertools.pairwise(cycle)]
        pytest.fail("import cycle " + " <- ".join(cycle) + ":\n" + "\n".join(steps))


def test_citeflow_never_imports_its_test_support(graph: grimp.ImportGraph) -> None:
    support = {"citeflow.testing", *graph.find_descendants("citeflow.testing")}
    leaks = [
        _how_imported(graph, importer, imported)
        for imported in support
        for importer in graph.find_modules_that_directly_import(imported)
        if importer not in support
    ]
    assert not leaks, "\n".join(leaks)


def test_modules_are_at_most_400_lines_or_say_why() -> None:
    """No module of citeflow, its benchmarks or its integrations is over `MAX_LINES` lines
    without saying why at its top."""
    oversized = {}
    for path in sorted(
        p for d in ("src", "bench", "integrations") for p in ROOT.glob(f"{d}/**/*.py")
    ):
        lines = path.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_LINES and not REASON.search("\n".join(lines[:20])):
            oversized[path.relative_to(ROOT).as_posix()] = len(lines)
    assert oversized == {}
