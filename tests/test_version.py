"""Code versions (dpsd/version.py): what changes them, the same hash over a git commit, each method's
version over what its runs import, and the runs of today's code of their method recorded under an older
rule given today's version (tools/retag_code_version.py)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from conftest import load_tool
from dpsd.config import compose
from dpsd.input_space import InputConvention
from dpsd.report.runs import RUN_COLUMNS, read_archive, write_archive
from dpsd.sweep.store import equivalent_versions, retag_equivalent_runs
from dpsd.teachers import teacher_key
from dpsd import version
from dpsd.version import (METHOD_CODE_VERSION, code_version, code_version_at, meaning, method_code_version,
                          source_hash, teacher_code_version)

SOURCES = ("pkg", "pyproject.toml")
MODULE = '"""Doc."""\nX = 1  # one\n\ndef f():\n    """Doc."""\n    return X\n'


def test_code_version_ignores_comments_and_docstrings_but_not_code(tmp_path):
    """Staleness follows what the sources compute: a comment or a docstring keeps the version; a changed
    constant or statement changes it."""
    base = tmp_path / "m.py"
    base.write_text(MODULE)
    reworded = tmp_path / "r.py"
    reworded.write_text('"""Other words."""\n# a comment\nX = 1\n\ndef f():\n    return X\n')
    changed = tmp_path / "c.py"
    changed.write_text(MODULE.replace("X = 1", "X = 2"))
    assert meaning(base) == meaning(reworded) != meaning(changed)


def test_a_module_s_meaning_names_only_the_fields_its_code_fills(tmp_path):
    """The hashed bytes are the syntax tree without empty fields, what Python 3.11, 3.12 and 3.13 all give for
    the same code: the plain ``ast.dump`` gave each version its own bytes (3.12 adds ``type_params=[]`` to every
    function), so the runs a GPU machine's Python 3.12 recorded were stale on a 3.11 laptop."""
    path = tmp_path / "m.py"
    path.write_text(MODULE)
    assert meaning(path) == (b"Module(body=[Assign(targets=[Name(id='X', ctx=Store())], value=Constant(value=1)), "
                             b"FunctionDef(name='f', args=arguments(), body=[Return(value=Name(id='X', ctx=Load()))])])")


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True)


@pytest.fixture
def tree(tmp_path) -> Path:
    """A git checkout with a package of one module, one config file and a pyproject, committed."""
    (tmp_path / "pkg" / "conf").mkdir(parents=True)
    (tmp_path / "pkg" / "m.py").write_text(MODULE)
    (tmp_path / "pkg" / "conf" / "method.yaml").write_text("lr: 0.1\n")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "pkg"\n')
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_a_config_value_or_a_tools_setting_leaves_the_code_version_and_pyproject_or_code_moves_it(tree):
    """YAML values reach a result through the composed config, which the cell's config hash identifies
    (tests/test_sweep.py): changing one leaves the code version, and so every other cell, alone."""
    before = source_hash(SOURCES, root=tree)
    (tree / "pkg" / "conf" / "method.yaml").write_text("lr: 0.2\n")
    assert source_hash(SOURCES, root=tree) == before
    (tree / "pyproject.toml").write_text('[project]\nname = "pkg"\ndependencies = ["torch"]\n')
    assert source_hash(SOURCES, root=tree) != before
    (tree / "pyproject.toml").write_text('[project]\nname = "pkg"\n[tool.importlinter]\nroot_packages = ["pkg"]\n')
    assert source_hash(SOURCES, root=tree) == before  # a tool's settings (the import layers) compute nothing
    (tree / "pyproject.toml").write_text('[project]\nname = "pkg"\n[project.optional-dependencies]\ndev = ["optuna"]\n')
    assert source_hash(SOURCES, root=tree) == before  # an extra's tools (pytest, the study's optimiser) neither
    (tree / "pkg" / "m.py").write_text(MODULE.replace("X = 1", "X = 2"))
    assert source_hash(SOURCES, root=tree) != before


def test_the_hash_of_a_commit_is_the_hash_of_its_checkout(tree, monkeypatch):
    """``code_version_at`` reads a commit's files from git and hashes them as the working tree's are."""
    import dpsd.version as version

    monkeypatch.setattr(version, "SOURCES", SOURCES)
    monkeypatch.setattr(version, "RESULT_FREE", ())
    at_commit = code_version_at("HEAD", root=tree)
    assert at_commit == f"{version.__version__}+src{source_hash(SOURCES, root=tree)}"
    (tree / "pkg" / "m.py").write_text(MODULE.replace("X = 1", "X = 2"))
    git(tree, "commit", "-q", "-am", "two")
    assert code_version_at("HEAD~1", root=tree) == at_commit != code_version_at("HEAD", root=tree)
    assert code_version_at("0" * 40, root=tree) is None


FILES = {
    "dpsd/experiment.py": "from dpsd.methods import METHODS\nfrom dpsd.data import load\n",
    "dpsd/methods/__init__.py": "from dpsd.methods import a, b\n",
    "dpsd/methods/base.py": "def register_method(name): ...\n",
    "dpsd/data.py": "X = 1\n",
    "dpsd/methods/a.py": 'from dpsd.methods.base import register_method\nfrom dpsd import shared\n@register_method("a")\nclass A: ...\n',
    "dpsd/methods/b.py": ('from dpsd.methods.base import register_method\n@register_method("b")\nclass B:\n'
                         '    def f(self):\n        from dpsd.methods.a import A\n'),
    "dpsd/shared.py": "Y = 1\n",
    "pyproject.toml": '[project]\nname = "dpsd"\n',
}


def test_a_method_s_version_hashes_what_its_runs_import_and_not_the_other_methods():
    """The driver's and the method module's import closure (imports in functions too, submodules named in
    ``from`` imports), not the registry that imports every method: a change to method a stales a and b
    (b imports a), a change to b only b, a change to the driver both."""
    assert version.closure(["dpsd/experiment.py", "dpsd/methods/a.py"], FILES) == {
        "dpsd/experiment.py", "dpsd/data.py", "dpsd/methods/a.py", "dpsd/methods/base.py", "dpsd/shared.py"}
    assert version.method_module("b", FILES) == "dpsd/methods/b.py"
    with pytest.raises(ValueError, match="no module registers the method 'c'"):
        version.method_module("c", FILES)

    def digests(files):
        return {m: version._method_digest(files, m) for m in "ab"}

    before = digests(FILES)
    assert before["a"] != before["b"]
    after_a = digests({**FILES, "dpsd/shared.py": "Y = 2\n"})
    after_b = digests({**FILES, "dpsd/methods/b.py": FILES["dpsd/methods/b.py"] + "Z = 1\n"})
    after_driver = digests({**FILES, "dpsd/data.py": "X = 2\n"})
    after_pyproject = digests({**FILES, "pyproject.toml": '[project]\nname = "dpsd"\nversion = "2"\n'})
    assert after_a["a"] != before["a"] and after_a["b"] != before["b"]  # b imports a, which imports shared
    assert after_b["a"] == before["a"] and after_b["b"] != before["b"]
    assert all(after_driver[m] != before[m] and after_pyproject[m] != before[m] for m in "ab")


def test_today_s_methods_have_versions_that_name_them_and_a_baseline_leaves_the_ladder_alone():
    """On this checkout: DP-SGD's module is in DP-SGD's closure and not in DPSD's or DGD's."""
    files = version._working_files(version.SOURCES, version.RESULT_FREE, version.ROOT)
    assert "baselines/dpsgd.py" in version.closure([version.DRIVER, version.method_module("dpsgd", files)], files)
    for method in ("dpsd", "dgd", "dpdfd", "dp_dfd", "fed_dpsd"):
        assert "baselines/dpsgd.py" not in version.closure([version.DRIVER, version.method_module(method, files)], files)
        assert re.fullmatch(rf"\d+\.\d+\.\d+\+{method}\.[0-9a-f]{{12}}", method_code_version(method))
        assert version.is_current(method_code_version(method))
    assert not version.is_current(code_version()) and not version.is_current("0.1.0+dgd.000000000000")


def test_runs_of_todays_method_code_get_todays_method_version_and_others_stay_stale(tmp_path):
    """A (recorded version, method) is vouched for by a clean commit of its runs whose code of that method
    hashes (today's rule) to today's, or by being today's whole-tree version; its runs get today's method
    version and keep the recorded one; one whose commits hash elsewhere, or only name dirty trees, stays."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("dpsd", artifact_location=(tmp_path / "art").as_uri())
    today = method_code_version("dgd")
    same, other, dirty, tree = "1.0+srcSAME", "1.0+srcOTHER", "1.0+srcDIRTY", code_version()
    commits = {("aaa", "dgd"): today, ("bbb", "dgd"): "1.0+dgd.ELSE", ("aaa", "pate"): "1.0+pate.ELSE"}
    runs = {}
    for name, method, recorded, commit in [("a", "dgd", same, "aaa"), ("b", "dgd", same, "aaa-dirty"),
                                           ("c", "dgd", other, "bbb"), ("d", "dgd", dirty, "aaa-dirty"),
                                           ("e", "pate", same, "aaa"), ("f", "pate", tree, "zzz-dirty")]:
        tags = {"code_version": recorded, "git_commit": commit, "config_hash": name, "cell_status": "done", "method": method}
        runs[name] = client.create_run(experiment, tags=tags).info.run_id
    vouched = equivalent_versions(client, [experiment], version_at=lambda commit, method: commits.get((commit, method)))
    assert vouched == {(same, "dgd"): "aaa", (tree, "pate"): f"tree {tree}"}
    changed = retag_equivalent_runs(client, [experiment], vouched)
    assert changed == {runs["a"]: same, runs["b"]: same, runs["f"]: tree}
    tags = {name: client.get_run(run_id).data.tags for name, run_id in runs.items()}
    assert [tags[n].get(METHOD_CODE_VERSION) for n in "abcdef"] == [today, today, None, None, None, method_code_version("pate")]
    assert tags["b"]["code_version_recorded"] == same and tags["b"]["code_version_vouched_by"] == "aaa"
    assert "code_version_recorded" not in tags["c"] and tags["c"]["code_version"] == other
    assert equivalent_versions(client, [experiment], version_at=lambda commit, method: commits.get((commit, method))) == {}


def _store(tmp_path):
    """An empty MLflow store under ``tmp_path/results``, as the retag tool finds one: the folder, a client, the
    experiment's id."""
    results = tmp_path / "results"
    results.mkdir()
    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    return results, client, client.create_experiment("dpsd", artifact_location=(results / "art").as_uri())


def test_the_retag_tool_updates_the_store_and_the_archive(tmp_path, monkeypatch, capsys):
    import dpsd.sweep.store as store

    tool = load_tool("retag_code_version")
    results, client, experiment = _store(tmp_path)
    old = "0.0.1+srcOLD"
    run = client.create_run(experiment, tags={"code_version": old, "git_commit": "aaa", "method": "dgd"}).info.run_id
    archive = tmp_path / "runs.csv"
    row = {column: "" for column in RUN_COLUMNS} | {
        "config_hash": "h", "run_id": run, "status": "FINISHED", "cell_status": "done", "code_version": old,
        "start_time": pd.Timestamp("2026-11-24T00:00:00+00:00"), "accuracy": 0.5}
    write_archive(pd.DataFrame([row]), archive)
    monkeypatch.setattr(store, "method_code_version_at",
                        lambda commit, method: method_code_version(method) if commit == "aaa" else None)
    tool.main(["--results-dir", str(results), "--archive", str(archive)])
    assert client.get_run(run).data.tags[METHOD_CODE_VERSION] == method_code_version("dgd")
    assert read_archive(archive)["code_version"].tolist() == [method_code_version("dgd")]
    assert f"dgd {old}: today's {method_code_version('dgd')} (vouched by aaa)" in capsys.readouterr().out


@pytest.mark.parametrize("store", ["none", "empty"])
def test_the_retag_tool_retags_archive_rows_a_store_does_not_hold(tmp_path, monkeypatch, store):
    """A fresh clone has no store, and `dpsd pages` makes an empty one: the archive's rows whose method version is
    vouched for by --result-neutral-since get today's version either way (the version names its method)."""
    tool = load_tool("retag_code_version")
    results = tmp_path / "results"
    results.mkdir()
    if store == "empty":
        MlflowClient(f"sqlite:///{results / 'mlflow.db'}").create_experiment("dpsd")
    old, other = "0.0.1+dgd.0123456789ab", "0.0.1+pate.0123456789ab"
    archive = tmp_path / "runs.csv"
    rows = [{column: "" for column in RUN_COLUMNS} | {
        "config_hash": name, "run_id": name, "status": "FINISHED", "cell_status": "done", "code_version": version,
        "start_time": pd.Timestamp("2026-11-24T00:00:00+00:00"), "accuracy": 0.5} for name, version in (("a", old), ("b", other))]
    write_archive(pd.DataFrame(rows), archive)
    monkeypatch.setattr(tool, "result_neutral", lambda commit, methods: {(old, "dgd"): f"result-neutral since {commit}"})
    tool.main(["--results-dir", str(results), "--archive", str(archive), "--result-neutral-since", "abc1234"])
    assert read_archive(archive)["code_version"].tolist() == [method_code_version("dgd"), other]


def test_the_retag_tool_leaves_the_runs_on_a_changes_path_stale(tmp_path, monkeypatch):
    """--stale-where: a run whose logged config matches every pair of one group keeps its version (the change
    computes other numbers there), the others of its version get today's; an archive row the store does not hold is
    read back from the spec cell with its config hash, and left as it is where no cell has it."""
    tool = load_tool("retag_code_version")
    results, client, experiment = _store(tmp_path)
    old = "0.0.1+dpsd.0123456789ab"
    runs = {}
    for name, normalization, output in (("mapped", "mean_std", "tanh"), ("plain", "minus_one_one", "tanh"),
                                        ("batchnorm", "mean_std", "tanh_batchnorm")):
        run = client.create_run(experiment, tags={"code_version": old, "method": "dpsd"}).info.run_id
        client.log_param(run, "model.teacher.input.normalization", normalization)
        client.log_param(run, "model.generator.output", output)
        client.log_param(run, "method.name", "dpsd")
        runs[name] = run
    archive = tmp_path / "runs.csv"
    rows = [{column: "" for column in RUN_COLUMNS} | {
        "config_hash": name, "run_id": run_id, "status": "FINISHED", "cell_status": "done", "code_version": old,
        "start_time": pd.Timestamp("2026-11-24T00:00:00+00:00"), "accuracy": 0.5}
        for name, run_id in [*runs.items(), ("elsewhere", "not-in-the-store"), ("mapped_elsewhere", "neither"),
                             ("no_generator", "a-teacher"), ("no_cell", "nor-this")]]
    write_archive(pd.DataFrame(rows), archive)
    saved = tmp_path / "vouched.json"
    saved.write_text(json.dumps([[old, "dpsd", "result-neutral since abc1234"]]))
    monkeypatch.setattr(tool, "spec_configs", lambda: {
        "elsewhere": {"model.teacher.input.normalization": "minus_one_one", "model.generator.output": "tanh"},
        "mapped_elsewhere": {"model.teacher.input.normalization": "mean_std", "model.generator.output": "tanh"},
        "no_generator": {"model.teacher.input.normalization": "mean_std", "model.generator.output": "tanh",
                         "method.name": "teacher"}})
    tool.main(["--results-dir", str(results), "--archive", str(archive), "--vouched", str(saved),
               "--stale-where",
               "model.teacher.input.normalization=mean_std,model.generator.output=tanh,method.name!=teacher"])
    today = method_code_version("dpsd")
    tags = {name: client.get_run(run).data.tags.get(METHOD_CODE_VERSION) for name, run in runs.items()}
    assert tags == {"mapped": None, "plain": today, "batchnorm": today}
    versions = dict(zip(read_archive(archive)["config_hash"], read_archive(archive)["code_version"]))
    assert versions == {"mapped": old, "plain": today, "batchnorm": today, "elsewhere": today,
                        "mapped_elsewhere": old, "no_generator": today, "no_cell": old}


def test_the_retag_tool_saves_a_measurement_and_applies_it_later(tmp_path, monkeypatch):
    """--save-vouched writes what --result-neutral-since measured and stops, retagging nothing; --vouched applies
    it later, to runs recorded after the measurement too, without measuring again."""
    tool = load_tool("retag_code_version")
    results = tmp_path / "results"
    results.mkdir()
    old = "0.0.1+dgd.0123456789ab"
    archive = tmp_path / "runs.csv"
    row = {column: "" for column in RUN_COLUMNS} | {
        "config_hash": "a", "run_id": "a", "status": "FINISHED", "cell_status": "done", "code_version": old,
        "start_time": pd.Timestamp("2026-11-24T00:00:00+00:00"), "accuracy": 0.5}
    write_archive(pd.DataFrame([row]), archive)
    saved = tmp_path / "vouched.json"
    monkeypatch.setattr(tool, "result_neutral", lambda commit, methods: {(old, "dgd"): f"result-neutral since {commit}"})
    tool.main(["--result-neutral-since", "abc1234", "--save-vouched", str(saved), "--archive", str(archive)])
    assert read_archive(archive)["code_version"].tolist() == [old]
    monkeypatch.setattr(tool, "result_neutral", lambda commit, methods: pytest.fail("measured again"))
    tool.main(["--results-dir", str(results), "--archive", str(archive), "--vouched", str(saved)])
    assert read_archive(archive)["code_version"].tolist() == [method_code_version("dgd")]


def test_result_neutral_vouches_only_for_methods_whose_smoke_runs_compute_the_same_numbers(monkeypatch, capsys):
    """--result-neutral-since: a method whose code changed is vouched for where its smoke runs at the commit and
    here agree in every metric but the wall times, a metric only the newer code records (a diagnostic) listed; one
    whose numbers differ, that loses a metric, or whose run fails, is not."""
    tool = load_tool("retag_code_version")
    monkeypatch.setattr(tool, "method_code_version_at", lambda commit, method: f"0.0.1+{method}.old")
    monkeypatch.setattr(tool.subprocess, "run", lambda *args, **kwargs: None)  # no git worktree
    results = {"dafl": ({"acc": 0.5, "time_train_s": 1.0}, {"acc": 0.5, "time_train_s": 2.0}),
               "dpsd": ({"acc": 0.5}, {"acc": 0.25}),
               "dgd": ("Fault: boom", {"acc": 0.5}),
               "fed_dpsd": ({"acc": 0.5}, {"acc": 0.5, "topk_survival": 0.25}),
               "dpdfd": ({"acc": 0.5, "queries": 8.0}, {"acc": 0.5})}

    def smoke(tree, method, workdir, name="run"):
        before, after = results[method]
        value = after if tree == tool.ROOT else before
        return value if isinstance(value, str) else {k: v for k, v in value.items() if k not in tool.WALL_TIMES}

    monkeypatch.setattr(tool, "smoke_metrics", smoke)
    vouched = tool.result_neutral("abc1234", list(results))
    assert vouched == {(f"0.0.1+{m}.old", m): "result-neutral since abc1234: smoke run bit-identical"
                       for m in ("dafl", "fed_dpsd")}
    out = capsys.readouterr().out
    assert "dpsd 0.0.1+dpsd.old" in out and "differs: acc 0.5 -> 0.25" in out and "differs: Fault: boom" in out
    assert "identical (metrics added: topk_survival)" in out and "differs: queries 8.0 -> None" in out


def test_code_version_names_the_hash_and_teacher_keys_carry_the_teacher_code():
    assert re.fullmatch(r"\d+\.\d+\.\d+\+src[0-9a-f]{12}", code_version())
    key = teacher_key(compose([]), InputConvention())
    assert key.code == teacher_code_version() and key.code in json.dumps(key.__dict__)


def test_result_neutral_compares_every_metric_the_earlier_code_reports():
    retag = load_tool("retag_code_version")
    before = {"student_test_accuracy": 0.5, "eps_rigorous": 3.0}
    assert retag.same_numbers(before, {**before, "private_image_reads": 0.0})  # added by the new code: listed only
    assert not retag.same_numbers(before, {**before, "eps_rigorous": 3.0000001})
    assert not retag.same_numbers(before, {"student_test_accuracy": 0.5})  # a metric the new code lost
    assert not retag.same_numbers(before, "RuntimeError: boom")
