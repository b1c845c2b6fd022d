"""citeflow uses its dependencies through their public APIs only: it reads no private attribute
(``_name``) of an object that is not its own, since a library renames or drops those without
notice.

An AST scan of ``src/citeflow``. A private name read from ``self``, ``cls`` or ``type(self)`` is
citeflow's own when citeflow defines it somewhere (a function, a class, an assignment); from any
other object, from ``super()`` (a parent's, even where citeflow overrides it), or through
``getattr``/``hasattr`` with a literal name, it is a dependency's. `ALLOWED` lists the modules
exempt from the rule: only `citeflow.speedups`, the opt-in speed-ups, each with the benchmark
figure that justifies it at its top.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "citeflow"

#: modules (paths relative to src/citeflow) allowed to read dependencies' private attributes
ALLOWED: frozenset[str] = frozenset({"speedups.py"})

_OWN_RECEIVERS = {"self", "cls", "type(self)"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_names(trees: Iterable[ast.AST]) -> set[str]:
    """The names citeflow defines: functions, classes, assigned names and attributes."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def private_reads(tree: ast.AST, own: set[str]) -> list[tuple[int, str]]:
    """``(line, expression)`` of each read of a private attribute that is not citeflow's, in
    source order."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            receiver, name = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            receiver, name = node.args[0], node.args[1].value
        else:
            continue
        if _private(name) and not (ast.unparse(receiver) in _OWN_RECEIVERS and name in own):
            found.append(((node.lineno, node.col_offset), ast.unparse(node)))
    return [(line, text) for (line, _), text in sorted(found, key=lambda read: read[0])]


def test_the_scan_finds_private_reads_of_other_objects() -> None:
    code = ast.parse(
        "class A(Base):\n"
        "    def _mine(self): return self._mine() + self._x\n"
        "    def _tokenizer(self): return super()._tokenizer\n"
        "    def f(self, cell, llm):\n"
        "        self._x = 1\n"
        "        cell._tc; super()._tokenizer; self._get_model_name()\n"
        "        getattr(llm, '_async_http_client', None); type(self)._version\n"
        "        cell.__class__; getattr(llm, 'public')\n"
    )
    found = [text for _, text in private_reads(code, defined_names([code]))]
    assert found == [
        "super()._tokenizer",
        "cell._tc",
        "super()._tokenizer",
        "self._get_model_name",
        "getattr(llm, '_async_http_client', None)",
        "type(self)._version",
    ]


def test_citeflow_reads_no_private_attribute_of_a_dependency() -> None:
    trees = {path: ast.parse(path.read_text(), str(path)) for path in SRC.rglob("*.py")}
    own = defined_names(trees.values())
    found = [
        f"{path.relative_to(SRC)}:{line}: {text}"
        for path, tree in sorted(trees.items())
        if str(path.relative_to(SRC)) not in ALLOWED
        for line, text in private_reads(tree, own)
    ]
    assert found == []
