"""Code versions (dpsd/version.py): what changes them, the same hash over a git commit, and the runs of
today's code recorded under an older hashing rule given today's version (tools/retag_code_version.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from dpsd.config import compose
from dpsd.report.runs import RUN_COLUMNS, read_archive, write_archive
from dpsd.sweep.store import equivalent_versions, retag_equivalent_runs
from dpsd.teachers import teacher_key
from dpsd.version import code_version, code_version_at, meaning, source_hash, teacher_code_version

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


def test_a_config_value_leaves_the_code_version_and_pyproject_or_code_moves_it(tree):
    """YAML values reach a result through the composed config, which the cell's config hash identifies
    (tests/test_sweep.py): changing one leaves the code version, and so every other cell, alone."""
    before = source_hash(SOURCES, root=tree)
    (tree / "pkg" / "conf" / "method.yaml").write_text("lr: 0.2\n")
    assert source_hash(SOURCES, root=tree) == before
    (tree / "pyproject.toml").write_text('[project]\nname = "pkg"\ndependencies = ["torch"]\n')
    assert source_hash(SOURCES, root=tree) != before
    (tree / "pyproject.toml").write_text('[project]\nname = "pkg"\n')
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


def test_runs_of_todays_code_under_an_older_rule_get_todays_version_and_others_stay_stale(tmp_path):
    """A recorded version is vouched for by a clean commit of its runs that hashes (today's rule) to
    today's version; its runs and archive rows get today's version and keep the old one; a version whose
    commits hash elsewhere, or only name dirty trees, is left as recorded."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("dpsd", artifact_location=(tmp_path / "art").as_uri())
    today, same, other, dirty = "1.0+srcTODAY", "1.0+srcSAME", "1.0+srcOTHER", "1.0+srcDIRTY"
    commits = {"aaa": today, "bbb": "1.0+srcELSE"}  # what today's rule gives each commit
    runs = {}
    for name, version, commit in [("a", same, "aaa"), ("b", same, "aaa-dirty"), ("c", other, "bbb"),
                                  ("d", dirty, "aaa-dirty"), ("e", today, "ccc")]:
        tags = {"code_version": version, "git_commit": commit, "config_hash": name, "cell_status": "done"}
        runs[name] = client.create_run(experiment, tags=tags).info.run_id
    vouched = equivalent_versions(client, [experiment], today, version_at=commits.get)
    assert vouched == {same: "aaa"}
    changed = retag_equivalent_runs(client, [experiment], today, vouched)
    assert changed == {runs["a"]: same, runs["b"]: same}
    tags = {name: client.get_run(run_id).data.tags for name, run_id in runs.items()}
    assert [tags[n]["code_version"] for n in "abcde"] == [today, today, other, dirty, today]
    assert tags["b"]["code_version_recorded"] == same and tags["b"]["code_version_vouched_by"] == "aaa"
    assert "code_version_recorded" not in tags["c"]


def test_the_retag_tool_updates_the_store_and_the_archive(tmp_path, monkeypatch, capsys):
    import dpsd.sweep.store as store

    spec = importlib.util.spec_from_file_location("retag", Path(__file__).parents[1] / "tools" / "retag_code_version.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    results = tmp_path / "results"
    results.mkdir()
    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    experiment = client.create_experiment("dpsd", artifact_location=(results / "art").as_uri())
    old = "0.0.1+srcOLD"
    run = client.create_run(experiment, tags={"code_version": old, "git_commit": "aaa"}).info.run_id
    archive = tmp_path / "runs.csv"
    row = {column: "" for column in RUN_COLUMNS} | {
        "config_hash": "h", "run_id": run, "status": "FINISHED", "cell_status": "done", "code_version": old,
        "start_time": pd.Timestamp("2026-11-24T00:00:00+00:00"), "accuracy": 0.5}
    write_archive(pd.DataFrame([row]), archive)
    monkeypatch.setattr(store, "code_version_at", lambda commit: code_version() if commit == "aaa" else None)
    tool.main(["--results-dir", str(results), "--archive", str(archive)])
    assert client.get_run(run).data.tags["code_version"] == code_version()
    assert read_archive(archive)["code_version"].tolist() == [code_version()]
    assert f"{old}: same code as today (commit aaa)" in capsys.readouterr().out


def test_code_version_names_the_hash_and_teacher_keys_carry_the_teacher_code():
    assert re.fullmatch(r"\d+\.\d+\.\d+\+src[0-9a-f]{12}", code_version())
    key = teacher_key(compose([]))
    assert key.code == teacher_code_version() and key.code in json.dumps(key.__dict__)
