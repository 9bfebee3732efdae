"""Model audit (dpsd.privacy_ops.model_audit): ROC metrics against scikit-learn, the attacks on models
that do and do not memorise, and `dpsd audit model` end to end on a tiny digits run."""

import json

import mlflow
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score, roc_curve
from torch.utils.data import TensorDataset

from dpsd.cli import main
from dpsd.config import compose
from dpsd.data import load_digits
from dpsd.experiment import run_experiment
from dpsd.privacy_ops.model_audit import attack_metrics, audit_sets, distance_scores, loss_scores, roc_points


def sklearn_tpr_at(members, non_members, target):
    labels = np.r_[np.ones(len(members)), np.zeros(len(non_members))]
    fpr, tpr, _ = roc_curve(labels, np.r_[members, non_members])
    return tpr[fpr <= target].max()


def test_a_perfect_and_a_reversed_attack():
    assert attack_metrics(np.array([3.0, 2.0]), np.array([1.0, 0.0])) == {
        "auc": 1.0, "tpr_at_fpr_0.01": 1.0, "tpr_at_fpr_0.001": 1.0}
    assert attack_metrics(np.array([0.0, 1.0]), np.array([2.0, 3.0]))["auc"] == 0.0


def test_ties_count_half_and_move_together():
    # one member and one non-member share the top score: (0, 0) -> (1/2, 1/2) in one step
    fpr, tpr = roc_points(np.array([5.0, 1.0]), np.array([5.0, 0.0]))
    assert fpr.tolist() == [0.0, 0.5, 0.5, 1.0] and tpr.tolist() == [0.0, 0.5, 1.0, 1.0]
    # pairs: (5, 5) a tie counts 1/2, (5, 0) 1, (1, 5) 0, (1, 0) 1 -> 2.5 / 4
    assert attack_metrics(np.array([5.0, 1.0]), np.array([5.0, 0.0]))["auc"] == 0.625


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_and_low_fpr_tpr_agree_with_sklearn(seed):
    rng = np.random.default_rng(seed)
    # rounded scores: many ties between and within the groups
    members, non_members = np.round(rng.normal(0.5, 1, 3000), 1), np.round(rng.normal(0, 1, 2500), 1)
    ours = attack_metrics(members, non_members)
    assert ours["auc"] == pytest.approx(roc_auc_score(np.r_[np.ones(3000), np.zeros(2500)], np.r_[members, non_members]), abs=1e-12)
    for target in (0.01, 0.001):
        assert ours[f"tpr_at_fpr_{target:g}"] == pytest.approx(sklearn_tpr_at(members, non_members, target), abs=1e-12)
    assert 0.6 < ours["auc"] < 0.7  # Phi(0.5 / sqrt 2) = 0.638 for these two normals


def test_audit_sets_are_equal_sized_and_drawn_from_the_right_splits():
    train, test = TensorDataset(torch.arange(50.0)), TensorDataset(torch.arange(100.0, 130.0))
    members, non_members = audit_sets(train, test, 1000, seed=0)
    assert len(members) == len(non_members) == 30
    assert all(0 <= train[i][0] < 50 for i in members.indices) and len(set(members.indices)) == 30


def memoriser(x, y, steps=400):
    """A wide MLP trained to zero loss on (x, y): it memorises, so its loss separates members."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(x[0].numel(), 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model.eval()


def test_the_loss_attack_finds_a_memorising_model_and_not_an_untrained_one():
    data = load_digits(None, False, 8)
    x, y = data.train.tensors
    # random labels on both sides (Zhang et al. 2017): only memorisation can fit the members' ones,
    # and by symmetry a model that has not seen them cannot tell the two groups apart
    labels = torch.randint(0, 10, (200,), generator=torch.Generator().manual_seed(0))
    members, non_members = TensorDataset(x[:100], labels[:100]), TensorDataset(x[100:200], labels[100:])
    cpu = torch.device("cpu")
    trained = memoriser(x[:100], labels[:100])
    found = attack_metrics(loss_scores(trained, members, cpu), loss_scores(trained, non_members, cpu))
    assert found["auc"] > 0.95 and found["tpr_at_fpr_0.01"] >= 0.5
    torch.manual_seed(1)
    untrained = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    blind = attack_metrics(loss_scores(untrained, members, cpu), loss_scores(untrained, non_members, cpu))
    assert abs(blind["auc"] - 0.5) < 0.15


def test_a_generator_that_copies_its_members_is_caught_by_the_distance_attack():
    x, y = load_digits(None, False, 8).train.tensors
    members, non_members = TensorDataset(x[:50], y[:50]), TensorDataset(x[50:100], y[50:100])
    copied = distance_scores(x[:50], members, torch.device("cpu"))
    assert np.all(copied == 0)
    assert attack_metrics(copied, distance_scores(x[:50], non_members, torch.device("cpu")))["auc"] == 1.0
    noise = torch.randn(200, *x.shape[1:], generator=torch.Generator().manual_seed(0))
    independent = attack_metrics(distance_scores(noise, members, torch.device("cpu")),
                                 distance_scores(noise, non_members, torch.device("cpu")))
    assert 0.3 < independent["auc"] < 0.7


def test_dpsd_audit_model_attacks_a_recorded_run_and_records_the_audit(tmp_path, capsys):
    cfg = compose(["method=dpsd", "privacy=label", "method.iterations=2", "method.batch_size=16", "device=cpu",
                   "model.teacher.recipe.steps=30", f"results_dir={tmp_path}"])
    run_id = run_experiment(cfg, show_progress=False)["run_id"]
    capsys.readouterr()
    assert main(["audit", "model", run_id, f"results_dir={tmp_path}", "--synthetic", "300"]) == 0
    printed = json.loads(capsys.readouterr().out)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    audits = mlflow.search_runs(experiment_names=["dpsd"], filter_string="tags.kind = 'audit'")
    assert len(audits) == 1
    audit = audits.iloc[0]
    assert audit["tags.audited_run"] == run_id and audit["tags.target"] == "model"
    report = json.loads(mlflow.artifacts.load_text(f"runs:/{audit['run_id']}/model_audit.json"))
    assert report["members"] == report["non_members"] == 360  # the whole digits test split, as many members
    assert report["synthetic"] == 300
    assert set(report["attacks"]) == {"teacher_loss", "student_loss", "generator_distance"}
    for values in report["attacks"].values():
        assert 0 <= values["tpr_at_fpr_0.001"] <= values["tpr_at_fpr_0.01"] <= 1 and 0 <= values["auc"] <= 1
    assert audit["metrics.teacher_loss.auc"] == pytest.approx(report["attacks"]["teacher_loss"]["auc"])
    assert printed["run_id"] == audit["run_id"] and printed["attacks"] == report["attacks"]
    # the artifact folder works as well as the run id, and gives the same numbers
    folder = mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=str(tmp_path / "artifacts"))
    assert main(["audit", "model", folder, "tracking.enabled=false", "--synthetic", "300"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["attacks"] == report["attacks"]


def test_audit_model_of_a_missing_folder_stops_with_one_line(tmp_path, capsys):
    assert main(["audit", "model", str(tmp_path / "nowhere"), "tracking.enabled=false"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"dpsd audit: error: audit model: no artifact folder {str(tmp_path / 'nowhere')!r}"
