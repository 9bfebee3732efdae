"""`dpsd new method NAME --from EXISTING`: run in a scratch copy of the repository, the method it writes is
registered, composes at every scale the source has a file for, carries none of its source's words (its claim
a placeholder that fails until written), and once its claim is written passes the contract test and its stub."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dpsd(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("scaffold") / "repo"
    for part in ("dpsd", "baselines", "tests", "pyproject.toml"):
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, copy / part)
    return copy


def test_a_scaffolded_baseline_passes_the_contract_test(copy):
    made = dpsd(copy, "-m", "dpsd.cli", "new", "method", "label_rr", "--from", "lp1st")
    assert made.returncode == 0, made.stderr
    for path in ("baselines/label_rr.py", "dpsd/conf/method/label_rr.yaml", "tests/test_label_rr.py",
                 *(f"dpsd/conf/method_scale/{scale}/label_rr.yaml" for scale in ("smoke", "laptop"))):
        assert path in made.stdout and (copy / path).exists(), path
    assert "baselines/README.md: a row for label_rr" in made.stdout
    assert '@register_method("label_rr")' in (copy / "baselines/label_rr.py").read_text()
    assert "class LabelRr(Method)" in (copy / "baselines/label_rr.py").read_text()
    # the same budget as its source at smoke scale: the per-scale file came along
    check = dpsd(copy, "-c", "from dpsd.config import compose; "
                 "print(compose(['method=label_rr']).method.epochs, compose(['method=lp1st']).method.epochs)")
    assert check.returncode == 0, check.stderr
    assert check.stdout.split() == ["1", "1"]
    module = (copy / "baselines/label_rr.py").read_text()
    assert "Ghazi" not in module and "#" not in module  # none of LP-1ST's words: docstrings, comments, claim
    assert "Ghazi" not in (copy / "dpsd/conf/method/label_rr.yaml").read_text()
    tests = ["tests/test_label_rr.py", "tests/test_contract.py", "tests/test_method_configs.py", "-k", "label_rr"]
    unedited = dpsd(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert unedited.returncode == 1 and "the claim's notion is still the placeholder" in unedited.stdout
    (copy / "baselines/label_rr.py").write_text(module.replace(
        "'TODO: the privacy notion the paper claims (e.g. eps-label-DP)'", "'eps-label-DP'").replace(
        "'TODO: the paper, and the theorem the claim is from'", "'a label randomized response'"))
    tested = dpsd(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests)
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "3 passed" in tested.stdout  # its stub, its contract case, its YAML against its dataclass


def test_a_taken_name_or_a_shared_module_is_refused_in_one_line(copy):
    taken = dpsd(copy, "-m", "dpsd.cli", "new", "method", "lp1st", "--from", "template")
    assert taken.returncode == 2 and "is taken" in taken.stderr and taken.stderr.count("\n") == 1
    shared = dpsd(copy, "-m", "dpsd.cli", "new", "method", "mine", "--from", "dgd")
    assert shared.returncode == 2 and "shares dpsd.methods.dgd" in shared.stderr


def _registered() -> list[str]:
    from dpsd.methods import METHODS

    return sorted(METHODS.names())


@pytest.fixture(scope="module")
def sources_copy(tmp_path_factory) -> Path:
    """What ``new_method`` reads and writes (the config tree, the method modules, their registries), copied: every
    source is scaffolded in process, without a subprocess or a run."""
    copy = tmp_path_factory.mktemp("scaffold_sources")
    for part in ("dpsd/conf", "dpsd/methods", "baselines"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tests").mkdir()
    return copy


@pytest.mark.parametrize("source", _registered())
def test_every_method_the_command_accepts_scaffolds_python_that_compiles(sources_copy, source):
    """`dpsd new method X --from dp_dfd` once wrote a module that did not parse: a docstring holding a non-ASCII
    character (DP-DFD's "§III-A") ended at ast's end column, a byte offset, read as a character index, so the
    replacement swallowed the line break and the next statement joined the docstring's line. Every source the
    command accepts (a module of one method, in dpsd.methods or baselines) gives modules that compile."""
    from dpsd.errors import ConfigError
    from dpsd.scaffold import new_method

    try:
        made = new_method(f"copy_of_{source}", source, root=sources_copy)
    except ConfigError as refused:  # the one refusal for a registered name: a module that holds two methods
        assert "shares" in str(refused), refused
        return
    written = [path for path in made["written"] if path.endswith(".py")]
    assert any(path.startswith(("dpsd/methods/", "baselines/")) and "copy_of_" in path for path in written), written
    for path in written:
        source_text = (sources_copy / path).read_text()
        compile(source_text, path, "exec")  # a SyntaxError names the file and line
