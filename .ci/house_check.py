"""The house rules that lint-imports cannot see; CI runs this beside it (``.ci/run``).

Over every module of the ``gpucal`` package (the ``kernels/`` folder is installed as ``gpucal.kernels``):

1. ``private-import``: no import of a private module or a private name (starting with ``_``) of another
   gpucal package, nor an attribute reaching one through an imported module (``rows._reduce.f``); what a
   package shares it makes public where it lives. A package is ``gpucal.<name>`` (a module of the root,
   such as ``gpucal._frames``, is one of its own: the root's private modules serve the whole package);
2. ``rows-isinstance``: no ``Rows`` implementation (``LocalRows``, ``DaskRows``, ``StreamedRows``) read as
   a type outside ``gpucal/rows/`` (``isinstance`` / ``issubclass``, ``type(...) is``, ``case``, aliases,
   its name compared as a string): the methods ask the protocol, not the backend; they may build one;
3. ``string-import``: no import of a gpucal module by string (``import_module``, ``__import__``,
   ``find_spec``, ``pkgutil.resolve_name``, ``pydoc.locate``, aliases of these, ``sys.modules[...]``),
   an edge lint-imports cannot see. The one exception is a package's PEP 562 ``__getattr__`` in its
   ``__init__.py``, importing its own public names lazily: its ``TYPE_CHECKING`` block names the same
   modules, and lint-imports reads that. ``sys.modules[__name__]``, a module's own entry, names no
   other module and is no edge;
4. ``wheel`` (with ``--wheel PATH``): the wheel holds no top-level package but ``gpucal``, at its root or
   under ``<name>.data/purelib`` / ``platlib``.

Prints one line per finding (``path:line: rule: what``) and exits with status 1 when there is any.
"""

from __future__ import annotations

import argparse
import ast
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Source folder -> the package its modules are imported as.
SOURCES = {"gpucal": "gpucal", "kernels": "gpucal.kernels"}
ROWS_IMPLEMENTATIONS = frozenset({"LocalRows", "DaskRows", "StreamedRows"})
STRING_IMPORTS = frozenset({"import_module", "__import__", "find_spec", "resolve_name", "locate"})


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.what}"


def module_name(relative: Path) -> str:
    """The dotted name of the module at ``relative`` (a path inside the repository)."""
    parts = list(relative.with_suffix("").parts)
    parts[0] = SOURCES[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def as_installed(target: str) -> str:
    """An import path as it resolves in the installed package (``kernels.x`` is ``gpucal.kernels.x``)."""
    return f"gpucal.{target}" if target.split(".")[0] == "kernels" else target


def package_of(module: str) -> str:
    """``gpucal.<name>``, the package a module belongs to; ``gpucal`` for the root package itself."""
    return ".".join(module.split(".")[:2])


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """``(module, name)`` of each thing an import statement binds (``name`` empty for ``import x``)."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield as_installed(alias.name), ""
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, *([base] if base else [])])
    for alias in node.names:
        yield as_installed(base), alias.name


def bound_names(tree: ast.AST, module: str, is_package: bool) -> dict[str, str]:
    """What each name bound by an import of a gpucal module stands for, dotted (``r`` -> ``gpucal.rows``)."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = as_installed(alias.name)
                if alias.asname:
                    bound[alias.asname] = target
                else:  # ``import gpucal.rows`` binds ``gpucal``
                    bound[target.split(".")[0]] = target.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            for (target, name), alias in zip(imported(node, module, is_package), node.names, strict=True):
                bound[alias.asname or name] = f"{target}.{name}"
    return {name: target for name, target in bound.items() if target.split(".")[0] == "gpucal"}


def dotted(node: ast.expr) -> list[str] | None:
    """``["a", "b", "c"]`` for the expression ``a.b.c``, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def private_of_other_package(target: str, own: str) -> str | None:
    """The private part of ``target`` (dotted) when it lies in another gpucal package, else None."""
    if target.split(".")[0] != "gpucal" or package_of(target) == own:
        return None
    private = [p for p in target.split(".")[2:] if is_private(p)]
    return private[0] if private else None


def private_imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    own = package_of(module)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for target, name in imported(node, module, is_package):
            if target.split(".")[0] != "gpucal" or target == "gpucal" or package_of(target) == own:
                continue
            private = [p for p in target.split(".")[2:] if is_private(p)]
            if private:
                yield node.lineno, f"imports {target}, a private module of {package_of(target)}"
            elif is_private(name):
                yield node.lineno, f"imports the private name {name} of {target}"
    # The same reached through an attribute of an imported module: ``rows._reduce.merge_tables``.
    bound = bound_names(tree, module, is_package)
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or id(node) in inner:
            continue
        parts = dotted(node)
        if parts is None or parts[0] not in bound:
            continue
        target = ".".join([bound[parts[0]], *parts[1:]])
        reached = private_of_other_package(target, own)
        if reached is not None:
            yield node.lineno, f"reaches {target}, the private {reached} of {package_of(target)}"


def rows_isinstance(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every use of a ``Rows`` implementation as a type: outside ``gpucal.rows`` one may only build it.

    ``isinstance`` / ``issubclass``, ``type(rows) is LocalRows``, ``case LocalRows():``,
    ``dispatch.register(LocalRows)`` all read the class without calling it; so do aliases
    (``import LocalRows as L``) and a class name compared as a string. Calling it
    (``LocalRows(blocks)``) and naming it in an annotation pass.
    """
    aliases = {
        alias.asname or alias.name: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name in ROWS_IMPLEMENTATIONS
    }
    called: set[int] = set()
    annotations: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called.add(id(node.func))
        elif isinstance(node, ast.AnnAssign | ast.arg) and node.annotation is not None:
            annotations |= {id(n) for n in ast.walk(node.annotation)}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            annotations |= {id(n) for n in ast.walk(node.returns)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):  # type(rows).__name__ == "LocalRows"
            for name in sorted(
                {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                & ROWS_IMPLEMENTATIONS
            ):
                yield node.lineno, f"class name compared with {name!r} outside gpucal.rows; ask the protocol"
            continue
        if isinstance(node, ast.Name):
            name = aliases.get(node.id, node.id)
        elif isinstance(node, ast.Attribute):
            name = node.attr
        else:
            continue
        if name in ROWS_IMPLEMENTATIONS and id(node) not in called and id(node) not in annotations:
            yield node.lineno, f"{name} read as a type outside gpucal.rows; ask the protocol"


def may_name_gpucal(argument: ast.expr) -> bool:
    """Whether an import's string argument may name a gpucal module: it does, or it is computed (other
    than ``__name__``, the module's own name)."""
    if isinstance(argument, ast.Name) and argument.id == "__name__":
        return False
    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
        return argument.value.split(".")[0] in ("", "gpucal", "kernels")
    return True


def is_sys_modules(node: ast.expr) -> bool:
    return dotted(node) == ["sys", "modules"]


def string_imports(tree: ast.Module, is_package: bool) -> Iterator[tuple[int, str]]:
    exempt: set[int] = set()
    if is_package:  # the lazy public names of a package (PEP 562)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                exempt |= {id(n) for n in ast.walk(node)}
    aliases = {
        alias.asname: alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name in STRING_IMPORTS and alias.asname
    }
    for call in ast.walk(tree):
        if id(call) in exempt:
            continue
        if isinstance(call, ast.Subscript) and is_sys_modules(call.value) and may_name_gpucal(call.slice):
            yield call.lineno, "sys.modules[...] may look a gpucal module up by string; import it by name"
        if not isinstance(call, ast.Call) or not call.args:
            continue
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        name = aliases.get(name, name)
        if name in STRING_IMPORTS and may_name_gpucal(call.args[0]):
            yield call.lineno, f"{name}(...) may import a gpucal module by string; import it by name"
        elif name == "get" and isinstance(func, ast.Attribute) and is_sys_modules(func.value):
            if may_name_gpucal(call.args[0]):
                yield call.lineno, "sys.modules.get(...) may look a gpucal module up by string"
        elif name == "getattr" and len(call.args) > 1:
            attr = call.args[1]
            if isinstance(attr, ast.Constant) and attr.value in STRING_IMPORTS:
                yield call.lineno, f"getattr(..., {attr.value!r}) hides an import by string"


def check_source(source: str, path: str, module: str, is_package: bool = False) -> list[Finding]:
    """The findings of rules 1-3 in one module: ``module`` is its dotted name, ``path`` what to print."""
    tree = ast.parse(source, filename=path)
    found = [Finding(path, n, "private-import", w) for n, w in private_imports(tree, module, is_package)]
    if package_of(module) != "gpucal.rows":
        found += [Finding(path, n, "rows-isinstance", w) for n, w in rows_isinstance(tree)]
    found += [Finding(path, n, "string-import", w) for n, w in string_imports(tree, is_package)]
    return found


def check_tree(repo: Path) -> list[Finding]:
    """The findings of rules 1-3 over every module of gpucal in the repository at ``repo``."""
    found = []
    for folder in SOURCES:
        for path in sorted((repo / folder).rglob("*.py")):
            relative = path.relative_to(repo)
            source = path.read_text(encoding="utf-8")
            found += check_source(source, str(relative), module_name(relative), path.name == "__init__.py")
    return found


def check_wheel(wheel: Path) -> list[Finding]:
    """Rule 4: every file of the wheel lies under ``gpucal/`` or its ``.dist-info`` folder."""
    with zipfile.ZipFile(wheel) as archive:
        names = [name.split("/") for name in archive.namelist()]
    tops = {parts[0] for parts in names}
    # A wheel's <name>.data/purelib/ and .../platlib/ install beside the top-level folders too.
    tops |= {
        parts[2]
        for parts in names
        if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib")
    }
    return [
        Finding(
            str(wheel), 0, "wheel", f"top-level {top!r} beside gpucal: another project may ship that name"
        )
        for top in sorted(tops)
        if top != "gpucal" and not top.endswith((".dist-info", ".data"))
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, help="also check this wheel's top-level packages")
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    found = check_tree(args.repo)
    if args.wheel is not None:
        found += check_wheel(args.wheel)
    for finding in found:
        print(finding)
    print(f"house check: {len(found)} finding(s)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
