"""tools/rekey_teachers.py: a cached teacher carried to today's teacher code loads as cached, with its weights; the
probe that vouches for a family is the same with the same code and moves with what it trains."""

from __future__ import annotations

import json

import torch

from conftest import load_tool
from dpsd.config import compose, resolve_paths
from dpsd.data import input_convention, load_data
from dpsd.teachers import load_or_train_teacher, teacher_cache_dir, teacher_key
from dpsd.version import ROOT, teacher_code_version

rekey = load_tool("rekey_teachers")

TINY = ["model/teacher=small_cnn", "model.teacher.recipe.steps=3"]


def test_a_teacher_trained_by_older_teacher_code_is_carried_and_loads_with_its_weights(tmp_path, monkeypatch):
    import dpsd.teachers as teachers

    cfg = resolve_paths(compose([*TINY, f"results_dir={tmp_path}", "tracking=none"]))
    data = load_data(cfg)
    monkeypatch.setattr(teachers, "teacher_code_version", lambda: "0.1.0+told")
    _, trained = load_or_train_teacher(cfg, data, torch.device("cpu"))
    monkeypatch.undo()
    families = rekey.cached_by(teacher_cache_dir(cfg), "0.1.0+told")
    assert [len(files) for files in families.values()] == [1]
    [(path, stored)] = next(iter(families.values()))
    key, record = rekey.rekeyed(stored, teacher_code_version(), "vouched")
    teachers._write_atomically(path.parent / key.filename, record)

    _, loaded = load_or_train_teacher(cfg, data, torch.device("cpu"))
    assert loaded["cached"] and loaded["weights_sha256"] == trained["weights_sha256"]
    assert torch.load(loaded["path"], weights_only=False)["code_recorded"] == "0.1.0+told"
    assert path.exists()  # the old code's file stays for the old code


def test_the_probe_repeats_with_the_same_code_and_moves_with_what_it_trains():
    cfg = compose(TINY)
    family = {field: str(value) for field, value in teacher_key(cfg, input_convention(cfg)).__dict__.items()
              if field in rekey.FAMILY_FIELDS}
    first = rekey.probe(ROOT, family, "")
    assert len(first) == 64 and first == rekey.probe(ROOT, family, "")
    other = {**family, "recipe": json.dumps({**json.loads(family["recipe"]), "lr": 0.03})}
    assert rekey.probe(ROOT, other, "") != first


def test_a_commits_teacher_code_version_hashes_the_teacher_sources_that_commit_names(tmp_path):
    import subprocess

    from dpsd.version import source_hash, teacher_code_version_at

    def commit(sources: tuple[str, ...]) -> str:
        (tmp_path / "dpsd").mkdir(exist_ok=True)
        (tmp_path / "dpsd" / "version.py").write_text(f"TEACHER_SOURCES = {sources!r}\n")
        subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"], cwd=tmp_path,
                       check=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "b.py").write_text("B = 2\n")
    before, after = commit(("a.py",)), commit(("a.py", "b.py"))
    version = teacher_code_version()
    head = version.partition("+")[0]
    assert teacher_code_version_at(before, tmp_path) == f"{head}+t{source_hash(('a.py',), root=tmp_path)}"
    assert teacher_code_version_at(after, tmp_path) == f"{head}+t{source_hash(('a.py', 'b.py'), root=tmp_path)}"
    assert teacher_code_version_at(before, tmp_path) != teacher_code_version_at(after, tmp_path)
