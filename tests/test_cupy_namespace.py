"""Every ``xp.<name>`` the array-namespace code paths call exists in cupy.

No GPU runs here, so the cupy branches cannot execute; this catches the commonest way they break, a
numpy-only function (cupy installs and imports without a GPU). Names reached through a sub-namespace
(``xp.linalg.solve``) are checked down to the last attribute.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

cupy = pytest.importorskip("cupy", reason="cupy is in the test extra; without it this check cannot run")

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted([*(ROOT / "gpucal").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")])


def _xp_paths(tree: ast.AST) -> set[tuple[str, ...]]:
    """Attribute chains rooted at a name called ``xp``: ``xp.linalg.solve`` -> ("linalg", "solve")."""
    paths = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = []
            base: ast.expr = node
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id == "xp":
                paths.add(tuple(reversed(chain)))
    # Keep only maximal chains: ("linalg",) is implied by ("linalg", "solve").
    return {p for p in paths if not any(q[: len(p)] == p and len(q) > len(p) for q in paths)}


def _uses() -> dict[tuple[str, ...], list[str]]:
    uses: dict[tuple[str, ...], list[str]] = {}
    for path in SOURCES:
        for chain in _xp_paths(ast.parse(path.read_text())):
            uses.setdefault(chain, []).append(str(path.relative_to(ROOT)))
    return uses


def test_the_scan_finds_the_namespace_code():
    assert len(_uses()) > 20


@pytest.mark.parametrize(
    ("chain", "files"), sorted(_uses().items()), ids=lambda v: ".".join(v) if isinstance(v, tuple) else ""
)
def test_cupy_has_it(chain, files):
    obj = cupy
    for attr in chain:
        assert hasattr(obj, attr), f"cupy has no {'.'.join(('xp', *chain))}, used in {files}"
        obj = getattr(obj, attr)
