"""The code version a result was produced by.

``code_version()`` is the package version plus a hash of what the result-producing Python sources
*mean*: each module's syntax tree without docstrings, and the parsed ``pyproject.toml`` less its ``[tool]``
tables (the import layers, pytest's and mutmut's settings compute nothing) and its extras
(``[project.optional-dependencies]``: the contributors' tools and the study tool's optimiser, which no method imports)
(:data:`SOURCES`, less :data:`RESULT_FREE`). A comment, a docstring, the README, or the code that only
starts, records or renders runs therefore leaves it unchanged, while any change to what a run computes
changes it. YAML is not hashed here: a config file's values reach a result only through the composed
config, which a sweep cell's ``config_hash`` already identifies, so a changed YAML value re-keys exactly
the cells whose config it changes (retuning ``scale=laptop`` leaves the ladder's runs current) instead of
marking every recorded run stale. The git commit is recorded beside it for provenance (:func:`git_commit`),
not used for staleness: keyed on the commit, every commit (a README typo) would mark every cell stale.

Every run is tagged with both, and a sweep cell recorded by other code (of its method:
:func:`method_code_version` below) is *stale*: listed as such by
``dpsd sweep/reproduce --dry-run``, marked STALE in the report, and re-run only on request
(``--rerun-stale``). :func:`code_version_at` computes the same hash over a commit's files, so a run
recorded under an older rule can be checked against the current code (``tools/retag_code_version.py``).

``method_code_version(method)`` is the version that decides whether a recorded run is current: the same
hash over the files a run of ``method`` executes, the static import closure (:func:`closure`) of the run's
driver (:data:`DRIVER`) and of the module that registers the method, plus ``pyproject.toml``. A change to
DP-SGD's module then stales DP-SGD's runs, not the ladder's; a change to shared code (the driver, the
data, the privacy ledger) still stales every method whose closure holds it. The registries that import
every method (:data:`REGISTRIES`) are not followed, or every method would hold every other.
``code_version()``, the whole tree's hash, stays on each run as provenance beside the commit.

``teacher_code_version()`` is the narrower version a cached teacher depends on: the same hash over the
sources that train it (:data:`TEACHER_SOURCES`), so a change to a method does not retrain every
teacher, while a change to the teacher recipe, models or data loading does.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import tomllib
from functools import lru_cache
from pathlib import Path

from dpsd import __version__

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
SOURCES = ("dpsd", "baselines", "pyproject.toml")
"""Where the code that produces results lives (relative to the checkout or the installed package's parent)."""
RESULT_FREE = ("dpsd/version.py", "dpsd/cli.py", "dpsd/reproduce.py", "dpsd/quickstart.py", "dpsd/bench.py",
               "dpsd/sweep", "dpsd/tracking.py", "dpsd/progress.py", "dpsd/jsonio.py", "dpsd/report",
               "dpsd/threads.py", "dpsd/contention.py", "dpsd/allocator.py", "dpsd/privacy/boundary.py",
               "dpsd/cell_identity.py", "dpsd/member_rates.py")
"""Code that starts, schedules, records, prints or renders runs: changing it changes no recorded number (a
run's result is a function of its config, recorded and hashed with it, and of the code that computes it).
The thread hygiene (:mod:`dpsd.threads`) is here too: the waiting policy changes no number
(``tests/test_threads.py``), and the thread count was the machine's before it as after. So is the allocator
(:mod:`dpsd.allocator`: the same weights under either, ``tests/test_allocator.py``). So is the privacy boundary
(:mod:`dpsd.privacy.boundary`): it counts what a run touches and refuses a run whose releases do not cover it; a
run it lets through computes what it computed without it (its teacher handle returns the teacher's own outputs). So
is a cell's identity (:mod:`dpsd.cell_identity`): it names which recorded run a cell is, so a setting added to one
method at its historical value stales no other method's runs."""
METHOD_CODE_VERSION = "method_code_version"
"""The run tag holding :func:`method_code_version` (set by :func:`dpsd.tracking.record_run`)."""
DRIVER = "dpsd/experiment.py"
"""What runs every method: it validates, loads data and the teacher, calls the method, scores the student."""
REGISTRIES = ("dpsd/methods/__init__.py", "baselines/__init__.py")
"""Packages that import every method to register it: not followed by :func:`closure`."""
TEACHER_SOURCES = ("dpsd/teachers.py", "dpsd/models", "dpsd/data.py", "dpsd/datafiles.py", "dpsd/input_space.py",
                   "dpsd/augment.py", "dpsd/rendered_digits.py")
"""The modules that determine a trained teacher's weights."""


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def canonical_dump(node: object) -> str:
    """``ast.dump`` without the fields a node leaves empty (None or ``[]``), as Python 3.13's
    ``ast.dump(show_empty=False)``: one text for the same code on every Python version. The plain dump
    names every field, and versions add fields (3.12's ``type_params=[]`` on each function and class), so
    the same code hashed differently on a GPU machine's Python 3.12 than on a 3.11 laptop; ``ast.unparse``
    is no cure either (3.12 writes f-strings with other quotes)."""
    if isinstance(node, ast.AST):
        fields = ((name, getattr(node, name, None)) for name in node._fields)
        shown = ", ".join(f"{name}={canonical_dump(value)}" for name, value in fields if value not in (None, []))
        return f"{type(node).__name__}({shown})"
    if isinstance(node, list):
        return "[" + ", ".join(canonical_dump(item) for item in node) + "]"
    return repr(node)


@lru_cache(maxsize=None)
def meaning_of(text: str, name: str) -> bytes:
    """What the source file ``name`` holding ``text`` computes, without its comments and docstrings:
    the bytes hashed for it (a module's syntax tree in :func:`canonical_dump`). Kept per text, as
    :func:`_imported_modules` is: every method's version (:func:`method_code_version`) reads most of the same
    files, so a dry run planning every spec parses each file once rather than once per method."""
    if name.endswith(".py"):
        return canonical_dump(_without_docstrings(ast.parse(text, filename=name))).encode()
    if name.endswith(".toml"):  # the project and its build, not the tools' settings nor the extras' tools
        parsed = {k: v for k, v in tomllib.loads(text).items() if k != "tool"}
        if isinstance(parsed.get("project"), dict):
            parsed["project"] = {k: v for k, v in parsed["project"].items() if k != "optional-dependencies"}
        return json.dumps(parsed, sort_keys=True).encode()
    return text.encode()


def meaning(path: Path) -> bytes:
    """:func:`meaning_of` a file on disk."""
    return meaning_of(path.read_text(encoding="utf-8"), path.name)


def hashed(relative: str, names: tuple[str, ...], excluded: tuple[str, ...] = ()) -> bool:
    """Whether the file at ``relative`` (a POSIX path from the checkout root) counts: a file named in
    ``names``, or a Python module under a folder named there, outside ``excluded`` and caches."""
    def under(folders: tuple[str, ...]) -> bool:
        return any(relative == f or relative.startswith(f + "/") for f in folders)

    if under(excluded) or "__pycache__" in relative.split("/"):
        return False
    return relative in names or (relative.endswith(".py") and under(names))


def _working_files(names: tuple[str, ...], excluded: tuple[str, ...], root: Path) -> dict[str, str]:
    paths = [p for name in names for p in ((root / name).rglob("*.py") if (root / name).is_dir() else [root / name])]
    relative = {p.relative_to(root).as_posix(): p for p in paths if p.is_file()}
    return {rel: path.read_text(encoding="utf-8") for rel, path in relative.items() if hashed(rel, names, excluded)}


def _commit_files(commit: str, names: tuple[str, ...], excluded: tuple[str, ...], root: Path) -> dict[str, str] | None:
    """The hashed files at ``commit`` (path -> text); None where git or the commit is unavailable. Callers do not
    mutate it (it is cached by the commit's hash: :func:`_files_at`)."""
    sha = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", cwd=root)
    return _files_at(sha, names, excluded, root) if sha else None


@lru_cache(maxsize=64)
def _files_at(sha: str, names: tuple[str, ...], excluded: tuple[str, ...], root: Path) -> dict[str, str] | None:
    """:func:`_commit_files` of the commit ``sha``, read with one ``git cat-file --batch`` (a page that walks a
    method's history reads dozens of commits)."""
    listed = _git("ls-tree", "-r", sha, "--", *names, cwd=root)
    if listed is None:
        return None
    blobs = [(entry.split("\t", 1)[1], entry.split()[2]) for entry in filter(None, listed.splitlines())
             if entry.split()[1] == "blob"]
    blobs = [(rel, sha) for rel, sha in blobs if hashed(rel, names, excluded)]
    try:
        done = subprocess.run(["git", "cat-file", "--batch"], cwd=root, input="".join(f"{sha}\n" for _, sha in blobs).encode(),
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode:
        return None
    files, out, at = {}, done.stdout, 0
    for rel, sha in blobs:
        header_end = out.index(b"\n", at)
        size = int(out[at:header_end].split()[2])
        files[rel] = out[header_end + 1:header_end + 1 + size].decode("utf-8")
        at = header_end + 1 + size + 1
    return files


def _digest(files: dict[str, str]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode())
        digest.update(meaning_of(files[rel], rel))
    return digest.hexdigest()[:12]


def source_hash(names: tuple[str, ...], excluded: tuple[str, ...] = (), root: Path = ROOT) -> str:
    """12 hex digits of sha256 over each counted file's relative path and :func:`meaning_of` (:func:`hashed`)."""
    return _digest(_working_files(names, excluded, root))


@lru_cache(maxsize=1)
def code_version() -> str:
    """``<version>+src<hash 12>`` of the result-producing sources (:func:`source_hash`)."""
    return f"{__version__}+src{source_hash(SOURCES, RESULT_FREE)}"


def code_version_at(commit: str, root: Path = ROOT) -> str | None:
    """The code version, under today's rule, of the sources at git ``commit`` (None where git or the commit
    is unavailable). The package version is today's: the hash is what identifies the code."""
    files = _commit_files(commit, SOURCES, RESULT_FREE, root)
    return None if files is None else f"{__version__}+src{_digest(files)}"


@lru_cache(maxsize=None)
def _imported_modules(text: str, name: str) -> frozenset[str]:
    """Dotted names ``text`` imports anywhere (in functions too): ``from a.b import c`` gives ``a.b`` and
    ``a.b.c`` (``c`` may be a submodule)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text, filename=name)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def closure(roots: list[str], files: dict[str, str]) -> set[str]:
    """The files of ``files`` (relative path -> text) that ``roots`` import, directly or through each
    other, ``roots`` included; :data:`REGISTRIES` are not followed."""
    def path_of(module: str) -> str | None:
        base = module.replace(".", "/")
        return next((p for p in (f"{base}.py", f"{base}/__init__.py") if p in files and p not in REGISTRIES), None)

    seen, todo = set(), [r for r in roots if r in files]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(p for p in map(path_of, _imported_modules(files[current], current)) if p and p not in seen)
    return seen


def method_module(method: str, files: dict[str, str]) -> str:
    """The file that registers ``method`` (``@register_method("<method>")``)."""
    for rel, text in sorted(files.items()):
        if rel.endswith(".py") and f'register_method("{method}")' in text:
            return rel
    raise ValueError(f"no module registers the method {method!r} (expected @register_method({method!r}))")


def _method_digest(files: dict[str, str], method: str) -> str:
    kept = closure([DRIVER, method_module(method, files)], files) | {"pyproject.toml"}
    return _digest({rel: text for rel, text in files.items() if rel in kept})


def _method_version(files: dict[str, str], method: str) -> str:
    return f"{__version__}+{method}.{_method_digest(files, method)}"


@lru_cache(maxsize=1)
def _checkout_files() -> dict[str, str]:
    return _working_files(SOURCES, RESULT_FREE, ROOT)


@lru_cache(maxsize=None)
def method_code_version(method: str) -> str:
    """``<version>+<method>.<hash 12>`` of what a run of ``method`` executes (module docstring)."""
    return _method_version(_checkout_files(), method)


def is_current(version: str) -> bool:
    """Whether ``version`` (a :func:`method_code_version`, which names its method) is this checkout's
    code of its method; a whole-tree version (``+src``) or an unknown method's is not."""
    method = version.partition("+")[2].rpartition(".")[0]
    try:
        return bool(method) and method_code_version(method) == version
    except ValueError:
        return False


def method_code_version_at(commit: str, method: str, root: Path = ROOT) -> str | None:
    """:func:`method_code_version` of the sources at git ``commit`` (None where git, the commit or the
    method there is unavailable)."""
    files = _commit_files(commit, SOURCES, RESULT_FREE, root)
    if files is None:
        return None
    try:
        return _method_version(files, method)
    except ValueError:
        return None


def _git(*args: str, cwd: Path = ROOT) -> str | None:
    try:
        result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The checkout's commit (12 hex digits, ``-dirty`` with uncommitted source changes), or ``""`` outside git."""
    head = _git("rev-parse", "HEAD")
    if not head:
        return ""
    return head[:12] + ("-dirty" if _git("status", "--porcelain", "--untracked-files=no", "--", *SOURCES) else "")


@lru_cache(maxsize=1)
def teacher_code_version() -> str:
    """``<version>+t<hash 12>`` of :data:`TEACHER_SOURCES`."""
    return f"{__version__}+t{source_hash(TEACHER_SOURCES)}"


def teacher_code_version_at(commit: str, root: Path = ROOT) -> str | None:
    """:func:`teacher_code_version` at git ``commit``: the hash of the teacher sources that commit names (its own
    :data:`TEACHER_SOURCES`, so a commit that adds a module to the list is compared with what its parent hashed).
    None where git or the commit is unavailable."""
    own = _commit_files(commit, ("dpsd/version.py",), (), root)
    if own is None:
        return None
    files = _commit_files(commit, _teacher_sources_in(own["dpsd/version.py"]), (), root)
    return None if files is None else f"{__version__}+t{_digest(files)}"


def _teacher_sources_in(version_module: str) -> tuple[str, ...]:
    """The ``TEACHER_SOURCES`` literal a ``dpsd/version.py`` text assigns."""
    for node in ast.parse(version_module).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TEACHER_SOURCES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise ValueError("dpsd/version.py assigns no TEACHER_SOURCES")
