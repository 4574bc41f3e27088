"""The package's layers (docs/ARCHITECTURE.md, "Layers"): an import only
runs downwards, no module takes another's private names, there are no
import circles, and only the seam (_engine.py) calls the engine's run,
plan and session functions.  Read from the source with ast, so that a
caller of a private function breaks here on CI, not on a GPU machine."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "src" / "convstencil"

# top to bottom; a module may import its own layer and those below
LAYERS = [
    ("face", {"__init__", "__main__", "_apply", "_explain", "_scheme",
              "_scheme_run"}),
    ("distributed", {"distributed"}),
    ("choice", {"_backends", "_model"}),
    ("stencils", {"_stencil", "_presets", "_expr"}),
    ("device", {"_device", "_watch", "_memory", "_host"}),
    ("seam", {"_engine"}),
    ("core", {"_core"}),
]
LEVEL = {name: i for i, (_, names) in enumerate(LAYERS) for name in names}
# the engine calls that only the seam makes
ENGINE_CALLS = {"run", "run_device", "run_scheme", "run_scheme_device",
                "plan", "plan_cpu", "session_open", "session_run",
                "session_view", "session_copy", "session_close"}
# what the distributed layer may take from the package's face: its public
# API, as a user's script would
PUBLIC_FACE = {"apply"}


def _unit(path):
    """The layer unit of a module file: its stem, or "distributed"."""
    rel = path.relative_to(PACKAGE)
    return "distributed" if rel.parts[0] == "distributed" else path.stem


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _imports(path):
    """(imported unit, names taken from it or None, line) of the
    package's own modules that `path` imports."""
    tree = ast.parse(path.read_text())
    in_sub = path.parent != PACKAGE
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        up = node.level - (1 if in_sub else 0)  # levels above the package
        base = (node.module or "").split(".")[0]
        if up == 0 and in_sub:
            target = "distributed"  # from . import _plan (its own package)
        elif base:
            target = "distributed" if base == "distributed" else base
        else:
            target = None  # from .. import _a, _b: each name a module
        for alias in node.names:
            unit = target if target is not None else alias.name
            if unit == "distributed" or unit.startswith("_") or unit == (
                    "__init__"):
                found.append((unit, alias.name if target else None,
                              node.lineno))
            else:
                # a public name of the package itself (from .. import apply)
                found.append(("__init__", alias.name, node.lineno))
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(
    p.relative_to(PACKAGE)))
def test_imports_run_downwards(path):
    unit = _unit(path)
    for target, name, line in _imports(path):
        if target == unit:
            continue
        if unit == "distributed" and target == "__init__":
            assert name in PUBLIC_FACE, (
                "%s:%d takes %r from the package's face; the distributed "
                "layer uses the public API only" % (path.name, line, name))
            continue
        assert target in LEVEL, "%s:%d imports unknown %r" % (
            path.name, line, target)
        assert LEVEL[target] >= LEVEL[unit], (
            "%s:%d: %s (%s) imports %s (%s), a layer above it"
            % (path.name, line, unit, LAYERS[LEVEL[unit]][0], target,
               LAYERS[LEVEL[target]][0]))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(
    p.relative_to(PACKAGE)))
def test_no_private_names_of_other_modules(path):
    unit = _unit(path)
    tree = ast.parse(path.read_text())
    modules = {}
    for target, name, line in _imports(path):
        if name is None or target == unit:
            continue
        assert not (name.startswith("_") and target not in (
            "__init__",) and not _is_module(target, name)), (
            "%s:%d takes the private name %s of %s"
            % (path.name, line, name, target))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and (
                not node.module):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value,
                                                           ast.Name)
                and node.value.id in modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            owner = modules[node.value.id]
            allowed = owner == "_core" or (unit == "distributed"
                                           and owner.startswith("_")
                                           and (PACKAGE / "distributed" / (
                                               owner + ".py")).exists())
            assert allowed, ("%s:%d reads %s.%s, a private name of "
                             "another module" % (path.name, node.lineno,
                                                 owner, node.attr))


def _is_module(target, name):
    return (PACKAGE / (name + ".py")).exists() or (
        PACKAGE / "distributed" / (name + ".py")).exists()


def test_only_the_seam_calls_the_engine():
    for path in _modules():
        if path.stem == "_engine":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "_core"
                    and node.attr in ENGINE_CALLS):
                pytest.fail("%s:%d calls _core.%s; engine calls go "
                            "through _engine.py" % (path.name, node.lineno,
                                                    node.attr))


def test_no_import_circles():
    graph = {}
    for path in _modules():
        unit = _unit(path)
        graph.setdefault(unit, set()).update(
            t for t, _, _ in _imports(path) if t != unit)
    seen, stack = set(), []

    def visit(node):
        if node in stack:
            pytest.fail("import circle: %s" % " -> ".join(
                stack[stack.index(node):] + [node]))
        if node in seen:
            return
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            visit(nxt)
        stack.pop()
        seen.add(node)

    for node in sorted(graph):
        visit(node)
