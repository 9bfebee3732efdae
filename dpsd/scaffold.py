"""``dpsd new method NAME --from EXISTING``: a new method's files, copied from one that runs.

Writes the module (the source method's, its registered name and class names replaced), its YAML, a
``method_scale/<scale>/`` and ``teacher_scale/<scale>/`` file for every scale the source method has one for (so the
new method runs at the same budget, beside the same teacher, as the one it is compared with at every scale), the import that registers
it and a test stub that runs it through the contract; returns the files written and the checklist
of what a person still has to write (documentation rows, the scales test's table).
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from pathlib import Path

from dpsd.errors import ConfigError
from dpsd.privacy.claims import PLACEHOLDER

ROOT = Path(__file__).resolve().parents[1]
"""The repository the scaffold writes into: the one this ``dpsd`` package was imported from."""

PACKAGES = {"baselines": "baselines/__init__.py", "dpsd.methods": "dpsd/methods/__init__.py"}
"""Where a method module lives -> the file whose imports register it."""

TEST_STUB = '''"""{name}: copied from {source} by `dpsd new method {name} --from {source}`. Add the tests of the
equations it implements here (tests/test_lp1st.py-style checks of its mechanism and ledger)."""

from dpsd.config import compose

TEACHER = ["dataset=digits", "model.teacher.recipe.steps=30", "device=cpu", "tracking=none"]


def test_{name}_runs_and_fills_the_ledger_it_planned(run_as_planned, tmp_path):
    metrics, ledger = run_as_planned(compose(["method={name}", f"results_dir={{tmp_path}}", *TEACHER]))
    assert ledger["queries"] >= 1
'''


DOCSTRING = "TODO (dpsd new method): what this does, and the paper's equation it implements."
CLAIM_TEXT = {2: f"{PLACEHOLDER}: the privacy notion the paper claims (e.g. eps-label-DP)",
              3: f"{PLACEHOLDER}: the paper, and the theorem the claim is from"}
"""The positional arguments of :class:`~dpsd.privacy.claims.Claim` that say whose claim it is: notion, source."""


def placeholders(module: str) -> str:
    """The copied module without its source method's own words: every docstring a placeholder, every comment
    gone, and each ``Claim``'s notion and source a placeholder that :class:`~dpsd.privacy.claims.Claim` refuses,
    so a run fails in one line until a person writes them. The code itself is kept (it runs)."""
    tree = ast.parse(module)
    spans: list[tuple[int, int, int, int, str]] = []  # (line, col, end line, end col, replacement), 1-based lines
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            doc = node.value  # a docstring: a module's, a class's, a function's or an attribute's
            spans.append((doc.lineno, doc.col_offset, doc.end_lineno, doc.end_col_offset, f'"""{DOCSTRING}"""'))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Claim":
            for index, arg in enumerate(node.args):
                if index in CLAIM_TEXT:
                    spans.append((arg.lineno, arg.col_offset, arg.end_lineno, arg.end_col_offset, repr(CLAIM_TEXT[index])))
    lines = _lines(_without_comments(module))
    for line, col, end_line, end_col, replacement in sorted(spans, reverse=True):
        head, tail = _bytes(lines[line - 1])[:col].decode(), _bytes(lines[end_line - 1])[end_col:].decode()
        lines[line - 1:end_line] = [head + replacement + tail]
    return "".join(lines)


def _lines(text: str) -> list[str]:
    """``text``'s lines as Python's parser numbers them (``\\n``, ``\\r\\n`` or ``\\r``; ``str.splitlines`` also breaks
    at a form feed or a ``\\u2028`` inside a string or comment, which would shift every line after it)."""
    return io.StringIO(text, newline="").readlines()


def _bytes(line: str) -> bytes:
    """``line`` in UTF-8: ast's ``col_offset`` and ``end_col_offset`` count its bytes, not its characters (DP-DFD's
    "§III-A" in a docstring put the end column one past the newline, and the next line joined the placeholder's)."""
    return line.encode("utf-8")


def _without_comments(module: str) -> str:
    """``module`` with its comments removed (the code, strings and line numbers kept)."""
    lines = _lines(module)
    for token in tokenize.generate_tokens(io.StringIO(module, newline="").readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            text = lines[row - 1]
            lines[row - 1] = text[:col].rstrip() + ("\n" if text.endswith("\n") else "")
    return "".join(lines)


def yaml_placeholders(text: str, name: str) -> str:
    """The copied YAML's settings without the source's comments, under a placeholder saying what to write."""
    lines = text.splitlines()
    directives = [line for line in lines if line.startswith("# @package")]  # Hydra's, not a comment
    kept = [line.split(" #", 1)[0].rstrip() for line in lines if not line.lstrip().startswith("#")]
    return "\n".join([*directives, f"# TODO (dpsd new method): what {name} is, and a comment per setting naming "
                       "the paper's equation", *(line for line in kept if line)]) + "\n"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def new_method(name: str, source: str, root: Path = ROOT) -> dict:
    """Write method ``name`` into ``root``, copied from the registered method ``source``.

    Refused in one line: a name that is not a Python identifier or is already taken (registered or
    its files present), and a source that shares its module with another method (``dgd`` and
    ``dgd_plus``): copy a module that holds one method.
    """
    from dpsd.methods import METHODS

    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise ConfigError(f"dpsd new method: NAME must be a lower-case Python identifier, got {name!r}")
    cls = METHODS.get(source)
    module = inspect.getmodule(cls)
    siblings = [other for other in METHODS.names() if inspect.getmodule(METHODS.get(other)) is module]
    if len(siblings) > 1:
        raise ConfigError(f"dpsd new method: {source!r} shares {module.__name__} with {', '.join(set(siblings) - {source})}; "
                          "copy a method whose module holds it alone (e.g. lp1st, template)")
    package = module.__name__.rpartition(".")[0]
    if package not in PACKAGES:
        raise ConfigError(f"dpsd new method: {source!r} lives in {package}, not in {' or '.join(PACKAGES)}")
    old_module = Path(inspect.getsourcefile(module)).resolve().relative_to(ROOT)
    module_path = old_module.with_name(f"{name}.py")
    conf = Path("dpsd/conf")
    targets = {module_path: old_module, conf / "method" / f"{name}.yaml": conf / "method" / f"{source}.yaml"}
    for group in ("method_scale", "teacher_scale"):  # a scale's sizes for the method, and the teacher it gives it
        for scale_dir in sorted((root / conf / group).iterdir()) if (root / conf / group).is_dir() else ():
            if (scale_dir / f"{source}.yaml").exists():
                targets[conf / group / scale_dir.name / f"{name}.yaml"] = conf / group / scale_dir.name / f"{source}.yaml"
    test_path = Path("tests") / f"test_{name}.py"
    taken = [str(path) for path in [*targets, test_path] if (root / path).exists()]
    if name in METHODS or taken:
        raise ConfigError(f"dpsd new method: {name!r} is taken ({', '.join(taken) or 'registered'}); choose another NAME")

    def renamed(text: str) -> str:
        text = re.sub(rf"\b{re.escape(cls.__name__)}", _camel(name), text)  # the class and its Config
        return re.sub(rf"\b{re.escape(source)}\b", name, text)

    for target, origin in targets.items():
        text = renamed((root / origin).read_text())
        (root / target).write_text(placeholders(text) if target.suffix == ".py" else yaml_placeholders(text, name))
    (root / test_path).write_text(TEST_STUB.format(name=name, source=source))
    registry = root / PACKAGES[package]
    registry.write_text(registry.read_text() + f"from {package} import {name}  # noqa: F401  (dpsd new method --from {source})\n")
    written = [*targets, test_path, Path(PACKAGES[package])]
    todo = [
        f"{module_path}: change the algorithm; keep plan_ledger and fit recording the same events (the contract "
        "test compares them) and record PrivateImagesRelease if the student trains on the private images",
        f"dpsd/conf/method/{name}.yaml: one line per setting, a comment naming the equation (its dataclass must declare "
        "exactly its keys: `dpsd run` stops on a mismatch)",
        *(f"{path}: the budget at that scale, equal to {source}'s unless the comparison varies it"
          for path in targets if "method_scale" in str(path)),
        *(f"{path}: the teacher at that scale, {source}'s unless its paper names another"
          for path in targets if "teacher_scale" in str(path)),
        f"{'baselines/README.md' if package == 'baselines' else 'CONTRIBUTING.md / docs/'}: a row for {name} "
        "(what it is, its privacy notion)",
        f"tests/test_scales.py: EXPECTED rows for ({name!r}, scale) where its method_scale files set sizes",
        f"tests/test_contract.py: TINY[{name!r}] if its default run on digits takes more than a few seconds",
        f"check: python -m dpsd.cli privacy-report method={name}; python -m pytest -q {test_path}; "
        f"python -m pytest -q tests/test_contract.py tests/test_method_configs.py -k {name}",
    ]
    return {"written": [str(path) for path in written], "todo": todo}
