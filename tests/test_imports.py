"""The package's modules import one another without circles, and none imports another module's
underscore names (a private helper another module needs is that module's interface, named so)."""

import ast
import pathlib

import gpufile

PACKAGE = pathlib.Path(gpufile.__file__).resolve().parent


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    """Dotted name -> (file, is a package's __init__), for every .py file of the package."""
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _imports(mods):
    """(importer, imported module, names) for every import of a package module, at any depth
    in the file (imports inside functions too). ``_native`` is the extension module: it imports
    no Python module, so it closes no circle."""
    for name, (path, is_pkg) in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if alias.name == "_native" and node.module is None:
                        continue
                    if sub in mods:
                        yield name, sub, []
                    elif target in mods:
                        yield name, target, [alias.name]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods:
                        yield name, alias.name, []


def test_no_import_circles_among_the_package_modules():
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for src, dst, _ in _imports(mods):
        if dst != src:
            edges[src].add(dst)
    # A circle is a module that reaches itself; each found is named by its path.
    circles = set()
    for start in mods:
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    circles.add(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert not circles, sorted(circles)


def test_no_module_imports_another_module_s_underscore_names():
    mods = _modules()
    found = [f"{src} imports {name} from {dst}" for src, dst, names in _imports(mods)
             for name in names if name.startswith("_") and not name.startswith("__")]
    # ``from . import mod`` then ``mod._name``: the same reach into another module.
    for name, (path, _) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        aliases = {a.asname or a.name for node in ast.walk(tree)
                   if isinstance(node, ast.ImportFrom) and node.level and node.module is None
                   for a in node.names if a.name != "_native"}
        found += [f"{name} uses {node.value.id}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in aliases and node.attr.startswith("_")
                  and not node.attr.startswith("__")]
    assert not found, found
