"""A teacher recipe sized by its target: trained until a validation cut of the private split reaches the stated
accuracy, then stopped; the test split chooses nothing."""

import pytest
import torch

from dpsd.config import compose, resolve_paths
from dpsd.data import load_data
from dpsd.errors import ConfigError
from dpsd.experiment import resolve_run
from dpsd.teachers import load_or_train_teacher, validation_split, weights_digest


def cfg_with_target(tmp_path, accuracy, every=10, steps=200, validation=300):
    return resolve_paths(compose([
        "dataset=digits", "device=cpu", "tracking=none", f"results_dir={tmp_path}",
        f"model.teacher.recipe.steps={steps}",
        f"+model.teacher.recipe.target={{accuracy: {accuracy}, validation: {validation}, every: {every}}}"]))


def trained(cfg):
    setup = resolve_run(cfg)
    return load_or_train_teacher(cfg, load_data(cfg, setup.convention), torch.device("cpu"))


def killed_at_check(cfg, check: int, monkeypatch) -> None:
    """Train ``cfg``'s teacher and kill it as its ``check``-th check begins (a check measures validation, then test:
    the kill is at the ``2 * check - 1``-th measure), so the state of the check before is the last one kept."""
    import dpsd.teachers as teachers

    real, calls = teachers.evaluate_accuracy, {"n": 0}

    def killed(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2 * check - 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(teachers, "evaluate_accuracy", killed)
    with pytest.raises(KeyboardInterrupt):
        trained(cfg)


def test_training_stops_at_the_first_check_that_reaches_the_target(tmp_path):
    _, record = trained(cfg_with_target(tmp_path, accuracy=0.80))
    curve = record["training"]["curve"]
    assert record["training"]["reached"] and record["training"]["steps"] < 200
    assert [point["step"] for point in curve] == list(range(10, record["training"]["steps"] + 1, 10))
    assert curve[-1]["val_accuracy"] >= 0.80 > max(point["val_accuracy"] for point in curve[:-1])
    assert all(0 <= point["test_accuracy"] <= 1 for point in curve)  # measured for the page, chooses nothing


def test_an_unreachable_target_trains_every_step_and_says_so(tmp_path):
    _, record = trained(cfg_with_target(tmp_path, accuracy=1.01, every=50, steps=100))
    assert record["training"]["steps"] == 100 and not record["training"]["reached"]


def test_same_seed_same_weights_and_the_cache_keeps_the_curve(tmp_path):
    first = trained(cfg_with_target(tmp_path / "a", accuracy=0.80))[1]
    again = trained(cfg_with_target(tmp_path / "b", accuracy=0.80))[1]
    cached = trained(cfg_with_target(tmp_path / "a", accuracy=0.80))[1]
    assert first["weights_sha256"] == again["weights_sha256"] == cached["weights_sha256"]
    assert cached["cached"] and cached["training"] == first["training"]


def test_the_validation_cut_is_disjoint_from_what_the_teacher_trains_on():
    data = list(range(100))
    train, validation = validation_split(data, 20, seed=3)
    assert len(validation) == 20 and len(train) == 80
    assert set(train.indices).isdisjoint(validation.indices)


@pytest.mark.parametrize("size", [0, 1437])
def test_a_validation_cut_the_split_cannot_give_is_one_line(tmp_path, size):
    with pytest.raises(ConfigError, match="target.validation must be between 1 and 1436"):
        trained(cfg_with_target(tmp_path, accuracy=0.8, validation=size))


def test_weights_digest_changes_with_the_weights():
    net = torch.nn.Linear(2, 2)
    before = weights_digest(net)
    with torch.no_grad():
        net.weight += 1
    assert weights_digest(net) != before


def test_the_curve_tool_exports_every_check_of_a_cached_target_teacher(tmp_path):
    from conftest import load_tool

    _, record = trained(cfg_with_target(tmp_path, accuracy=0.80))
    tool = load_tool("teacher_curves")
    frame = tool.curves(tmp_path / "teachers")
    assert list(frame["step"]) == [point["step"] for point in record["training"]["curve"]]
    assert set(frame["weights_sha256"]) == {record["weights_sha256"]}
    tool.main(["--results-dir", str(tmp_path), "--csv", str(tmp_path / "c.csv"), "--figure", str(tmp_path / "c.png")])
    assert (tmp_path / "c.png").exists() and len(tool.pd.read_csv(tmp_path / "c.csv")) == len(frame)
    # a seed retrained to other weights is a teacher of its own, named by its digest where the seed has several
    other = frame.assign(file="other.pt", weights_sha256="f" * 64)
    third = frame.assign(file="third.pt", seed=frame["seed"] + 1)
    names = tool.labels(tool.pd.concat([frame, other, third]))
    digest, seed = record["weights_sha256"], int(frame["seed"].iloc[0])
    assert names == {frame["file"].iloc[0]: f"small_cnn default seed {seed} ({digest[:8]})",
                     "other.pt": f"small_cnn default seed {seed} (ffffffff)", "third.pt": f"small_cnn default seed {seed + 1}"}


def test_a_killed_training_goes_on_from_its_last_check_and_ends_with_the_weights_of_one_never_stopped(tmp_path,
                                                                                                     monkeypatch):
    """Steps 1 to 35 of an 80-step recipe checked every 10 (an epoch of digits is 11 batches: the kill falls mid-epoch),
    then a kill; the next training reads the state of step 30 and goes on; its weights and curve are the uninterrupted
    one's, and the partial file is gone once the teacher is cached."""
    whole = trained(cfg_with_target(tmp_path / "whole", accuracy=1.01, every=10, steps=80))[1]
    cfg = cfg_with_target(tmp_path / "killed", accuracy=1.01, every=10, steps=80)
    killed_at_check(cfg, 4, monkeypatch)
    monkeypatch.undo()
    [kept] = list((tmp_path / "killed" / "teachers").glob("*.partial"))
    assert torch.load(kept, weights_only=False)["steps_done"] == 30
    resumed = trained(cfg)[1]
    assert resumed["weights_sha256"] == whole["weights_sha256"]
    strip = lambda curve: [{k: v for k, v in point.items() if k != "seconds"} for point in curve]  # noqa: E731
    assert strip(resumed["training"]["curve"]) == strip(whole["training"]["curve"])
    assert not kept.exists()


def test_a_teacher_keeps_the_machine_of_each_check_and_of_its_end_and_the_curve_tool_exports_it(tmp_path, monkeypatch):
    """The thread count changes a teacher's weights on a CPU, so its record says where it trained: each check of its
    curve carries the machine of that check (a training resumed elsewhere keeps both), the cache record the machine it
    finished on, and the curves file a column of it, empty for a row of a teacher cached before records held it."""
    import dpsd.teachers as teachers
    from conftest import load_tool

    here = teachers.training_machine()
    assert f"{torch.get_num_threads()} torch threads" in here and f"torch {torch.__version__}" in here
    cfg = cfg_with_target(tmp_path, accuracy=1.01, every=10, steps=40)
    killed_at_check(cfg, 3, monkeypatch)
    monkeypatch.undo()
    monkeypatch.setattr(teachers, "training_machine", lambda: "another machine")
    record = trained(cfg)[1]
    assert [point["machine"] for point in record["training"]["curve"]] == [here, here, "another machine",
                                                                           "another machine"]
    [path] = (tmp_path / "teachers").glob("*.pt")
    assert teachers.read_cached(path)["machine"] == "another machine"

    tool = load_tool("teacher_curves")
    csv = tmp_path / "c.csv"
    older = tool.curves(tmp_path / "teachers").drop(columns="machine").assign(file="older.pt", seed=7,
                                                                            weights_sha256="e" * 64)
    older.to_csv(csv, index=False)  # a curves file written before the column
    tool.main(["--results-dir", str(tmp_path), "--csv", str(csv), "--figure", str(tmp_path / "c.png")])
    merged = tool.pd.read_csv(csv, keep_default_na=False)
    assert list(merged[merged["file"] == path.name]["machine"]) == [here, here, "another machine", "another machine"]
    assert set(merged[merged["file"] == "older.pt"]["machine"]) == {""}


def test_a_teacher_carried_to_todays_code_is_one_curve_under_the_file_todays_code_reads(tmp_path):
    """tools/rekey_teachers.py writes a teacher again under today's key and leaves the old file: the curves file lists
    the teacher once, under the new file, and its old file's rows in an earlier curves file give way to it."""
    import dpsd.teachers as teachers
    from conftest import load_tool

    trained(cfg_with_target(tmp_path, accuracy=0.80))
    [old] = (tmp_path / "teachers").glob("*.pt")
    stored = teachers.read_cached(old)
    carried = teachers.TeacherKey(**{**stored["key"], "code": teachers.teacher_code_version()})
    stored["key"] = {**stored["key"], "code": "an older teacher code"}  # the file as the older code keyed it
    teachers._write_atomically(old, stored)
    new = tmp_path / "teachers" / "carried.pt"
    teachers._write_atomically(new, {**stored, "key": carried.__dict__, "code_recorded": "an older teacher code"})
    tool = load_tool("teacher_curves")
    frame = tool.curves(tmp_path / "teachers")
    assert set(frame["file"]) == {"carried.pt"} and len(frame) == len(stored["training"]["curve"])
    csv = tmp_path / "c.csv"
    frame.assign(file=old.name).to_csv(csv, index=False)  # the curves file written before the teacher was carried
    tool.main(["--results-dir", str(tmp_path), "--csv", str(csv), "--figure", str(tmp_path / "c.png")])
    assert set(tool.pd.read_csv(csv)["file"]) == {"carried.pt"}
