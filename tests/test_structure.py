"""The shape of the code, checked: layers that import only downwards, no import cycles (function-level imports
counted), no private name crossing a module border, lazy imports only where they have a reason, and one import
name, ``bench_build``.

Module names are those installed: ``pipeline/x/y.py`` is ``bench_build.x.y``; ``stages/`` and ``manifests/`` are
``bench_build.stages`` and ``bench_build.manifests`` (pyproject.toml's ``package-dir``).
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"pipeline": "bench_build", "stages": "bench_build.stages", "manifests": "bench_build.manifests"}

#: third-party packages a function may import lazily, each for its reason
LAZY_OK = {
    "torch": "the optional `validate` extra; ≈ 2 s to import",
    "sklearn": "the optional `validate` extra",
    "nuscenes": "the optional `nuscenes` extra (its devkit pins numpy<2)",
    "pyquaternion": "comes with the `nuscenes` extra",
    "pykitti": "the optional `semantickitti` extra",
    "cv2": "comes with the `semantickitti` extra",
    "open3d": "≈ 1 s to import; only the demo ray-caster and mesh sampling need it",
    "matplotlib": "≈ 0.5 s to import; only pictures need it",
    "PIL": "comes with matplotlib; only pictures need it",
    "ray": "≈ 1 s to import; reading, scoring and exporting run without a cluster",
    "boto3": "≈ 0.3 s to import; only s3:// needs it",
    "botocore": "comes with boto3; only s3:// needs it",
    "datasets": "Hugging Face datasets: only its loader needs it",
    "duckdb": "only the DuckDB example needs it",
    "pandas": "only the pandas example needs it",
    "numba": "its import compiles nothing but costs ≈ 0.4 s; only kernels that run need it",
    "threadpoolctl": "inspects the loaded BLAS: only after NumPy is imported under the numeric pin",
    "numpy": "runtime.numeric sets NumPy's dispatch environment (the numeric pin) before NumPy loads",
    "scipy": "≈ 0.3 s to import: a worker loads only the submodules its stages use",
    "trimesh": "≈ 0.4 s to import (scipy.spatial, scipy.special …): only mesh readers and the demo objects use it, "
               "and every build's workers import the readers",
    "h5py": "≈ 0.1 s to import: only the object benchmarks' HDF5 files need it, and every build's workers import "
            "the readers",
    "miepython": "slow to import, and needed once per (index, wavelength): its tables are cached",
    # a submodule of a package imported up front elsewhere: the key is its dotted name
    "pyarrow.dataset": "≈ 0.13 s to import, pandas with it: only the Waymo reader filters files with it, and every "
                       "build's workers import the readers",
}
#: project modules whose functions may import project modules lazily, and why
LAZY_PROJECT_OK = {
    "bench_build.cli": "commands import NumPy-using modules only after the numeric pin is set, and --help stays fast",
    "bench_build.bench.cli": "the `bench` commands, like every command: after the numeric pin, --help stays fast",
    "bench_build": "the package's public names load on first use, so `import bench_build.stages` stays light",
    "bench_build.stages.frame": "a Frame's numba kernels load when a stage first needs them: reading a version "
                                "(open_version, each DataLoader worker) imports no numba",
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([FOLDERS[parts[0]], *parts[1:]]) if parts[0] in FOLDERS else ".".join(parts)


MODULES = {module_name(p): p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))
           if "__pycache__" not in p.parts}


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute)
                                                                      and t.attr == "TYPE_CHECKING")


def imports(path: Path):
    """(node, in_function) for every import statement outside ``if TYPE_CHECKING:``."""
    stack = [(ast.parse(path.read_text()), False)]
    while stack:
        node, in_fn = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                stack.extend((c, in_fn) for c in child.orelse)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_fn
            stack.append((child, in_fn or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))))


def targets(mod: str, node: ast.AST) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) of one statement, relative imports resolved."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    base = node.module or ""
    if node.level:
        pkg = mod.split(".") if MODULES[mod].name == "__init__.py" else mod.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    return [(base, a.name) for a in node.names]


def project_edges(mod: str) -> list[tuple[str, str | None, bool, int]]:
    """(project module imported, name, in a function, line) of one module."""
    out = []
    for node, in_fn in imports(MODULES[mod]):
        for base, name in targets(mod, node):
            if name and f"{base}.{name}" in MODULES:
                out.append((f"{base}.{name}", None, in_fn, node.lineno))
            elif base in MODULES:
                out.append((base, name, in_fn, node.lineno))
    return out


def test_the_tree_is_what_the_package_installs():
    assert "bench_build" in MODULES and "bench_build.stages" in MODULES and "bench_build.manifests" in MODULES


def with_packages(importer: str, target: str) -> set[str]:
    """Importing ``a.b.c`` first runs the ``__init__`` of ``a`` and ``a.b``: those count as imported too, except the
    packages the importer itself lies in (Python is already running them)."""
    parts = target.split(".")
    out = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    own = importer.split(".")
    mine = {".".join(own[:i]) for i in range(1, len(own))}
    return {m for m in out if m in MODULES and m not in mine and m != importer}


def test_no_import_cycles_counting_function_level_imports():
    """The stage registry finds stages by walking its package at run time, which no import statement shows; every
    other dependency is a statement (a package's ``__init__`` included), and together they must form no cycle."""
    graph = {m: set().union(*[with_packages(m, t) for t, _, _, _ in project_edges(m)]) for m in MODULES}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in MODULES:
        if m not in index:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_no_private_name_crosses_a_module_border():
    bad = []
    for mod, path in MODULES.items():
        for target, name, _, line in project_edges(mod):
            if name and name.startswith("_") and not name.startswith("__") and target != mod:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {name} from {target}")
        # module._private through an imported module object
        aliases = {}
        for node, _ in imports(path):
            for a in node.names:
                full = f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom) else a.name
                if full in MODULES and full != mod:
                    aliases[a.asname or a.name.split(".")[0] if isinstance(node, ast.Import) else a.asname
                            or a.name] = full
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def _lazy_reason(mod: str, base: str) -> str | None:
    """Why ``mod`` may import ``base`` inside a function, or None: ``base``'s top-level package or a dotted
    submodule of it in `LAZY_OK`. The standard library never needs it."""
    top = base.split(".")[0]
    if top in sys.stdlib_module_names:
        return None
    for prefix, why in LAZY_PROJECT_OK.items():
        if prefix != "bench_build" and (mod == prefix or mod.startswith(prefix + ".")):
            return why  # the command line: anything NumPy may load only after the pin
    if top in FOLDERS or top == "bench_build":
        return None
    parts = base.split(".")
    return next((LAZY_OK[k] for n in range(len(parts), 0, -1) if (k := ".".join(parts[:n])) in LAZY_OK), None)


def test_function_level_imports_only_where_there_is_a_reason():
    bad = []
    for mod, path in MODULES.items():
        for node, in_fn in imports(path):
            if not in_fn:
                continue
            for base, _ in targets(mod, node):
                if _lazy_reason(mod, base) is None:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: import of {base} inside a function")
    assert not bad, ("move these to the module's top (a lazy import needs a reason listed in LAZY_OK or "
                     "LAZY_PROJECT_OK: a slow or optional package, the numeric pin's ordering, a fast --help; "
                     "pipeline/README.md):\n" + "\n".join(sorted(set(bad))))


def test_the_kernels_import_nothing_else_from_the_stages():
    """stages/README.md: `stages/kernels/` is pure-array code below the frame model, importing nothing else from
    `stages/`, so a kernel never depends on a `Frame` or on another stage's file."""
    kernels = "bench_build.stages.kernels"
    bad = [f"{MODULES[mod].relative_to(ROOT)}:{line}: imports {target}" for mod in MODULES
           if mod == kernels or mod.startswith(kernels + ".") for target, _, _, line in project_edges(mod)
           if (target == "bench_build.stages" or target.startswith("bench_build.stages."))
           and target != kernels and not target.startswith(kernels + ".")]
    assert not bad, "kernels importing the rest of the stages:\n" + "\n".join(bad)


@pytest.mark.parametrize("folder", ["pipeline", "stages", "manifests", "tests", "deploy"])
def test_code_imports_bench_build_never_the_folder_names(folder):
    """Installed, the package is ``bench_build`` only: ``import pipeline`` would find a user's own folder."""
    bad = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert not bad, "imports of generic top-level names:\n" + "\n".join(bad)


def test_no_python_file_directly_in_pipeline_is_long():
    """Long modules live in subpackages split by concern; directly in pipeline/ only short ones."""
    long = {p.name: n for p in (ROOT / "pipeline").glob("*.py") if (n := len(p.read_text().splitlines())) > 320}
    assert not long, long


#: the layers, lowest first; a module may import from its own layer and the ones below (pipeline/README.md)
LAYERS = (
    ("bench_build.errors",),
    ("bench_build.stages",),
    ("bench_build.storage",),
    ("bench_build.manifests",),
    ("bench_build.format",),
    ("bench_build.plan", "bench_build.runtime"),
    ("bench_build.sources",),
    ("bench_build.render",),
    ("bench_build.build",),
    ("bench_build.export", "bench_build.loaders", "bench_build.score", "bench_build.validate", "bench_build.publish"),
    ("bench_build.bench",),
    ("bench_build.cli",),
)


def layer_of(mod: str) -> int | None:
    for i, packages in enumerate(LAYERS):
        if any(mod == p or mod.startswith(p + ".") for p in packages):
            return i
    return None


def test_every_module_has_a_layer():
    """A new package must be placed in LAYERS (and in pipeline/README.md) on purpose."""
    assert not [m for m in MODULES if m != "bench_build" and layer_of(m) is None]


def test_layers_import_only_downwards():
    bad = []
    for mod, path in MODULES.items():
        mine = layer_of(mod)
        if mine is None:
            continue  # the package's root: its public names load lazily, from every layer
        for target, _, in_fn, line in project_edges(mod):
            theirs = layer_of(target)
            if theirs is not None and theirs > mine:
                bad.append(f"{path.relative_to(ROOT)}:{line}: layer {mine} imports {target} (layer {theirs})"
                           + (" inside a function" if in_fn else ""))
    assert not bad, "imports upwards:\n" + "\n".join(bad)


def registers(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    """Whether a decorator makes the definition reachable without its name: ``@stage(...)`` (the stage registry),
    ``@app.command(...)`` / ``@app.callback(...)`` (typer). ``@cache``, ``@numba.njit`` and the like do not."""
    for d in node.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if (isinstance(f, ast.Name) and f.id == "stage") or (isinstance(f, ast.Attribute)
                                                             and f.attr in ("command", "callback")):
            return True
    return False


def test_every_module_level_name_is_used_somewhere():
    """A module-level function, class or constant that nothing names — no code, test, recipe or document — is dead
    code a reader would take for a live path. Definitions a decorator registers (stages, typer commands) are
    reached through the registry and are not counted here."""
    corpus = [p for folder in (*FOLDERS, "deploy", "tests") for p in (ROOT / folder).rglob("*")
              if p.suffix in (".py", ".toml", ".md", ".json", ".yaml") and "__pycache__" not in p.parts]
    corpus += [*ROOT.glob("*.md"), ROOT / "pyproject.toml"]
    words = Counter(w for p in corpus for w in re.findall(r"[A-Za-z_]\w*", p.read_text()))
    dead = []
    for path in MODULES.values():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not registers(node):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                names = [t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                         if isinstance(t, ast.Name)]
            else:
                continue
            dead += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                     if not n.startswith("__") and words[n] < 2]
    assert not dead, "defined and never named anywhere else (remove them):\n" + "\n".join(dead)
