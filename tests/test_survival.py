"""DPSD's top-k trap measured: the share of Eq. (5)'s answers in which the teacher's class survived the student's
top-k (dpsd/distill/survival.py), per annotation, over the run and over its tenths, without touching a random stream."""

import math

import pytest
import torch

from dpsd.config import compose, resolve_paths
from dpsd.data import load_data
from dpsd.distill.annotators import PrivateAnnotator
from dpsd.distill.survival import PHASES, SURVIVAL, survival_metrics, topk_survival
from dpsd.experiment import resolve_run
from dpsd.methods.base import RunContext
from dpsd.methods.dpdfd import DPDFD
from dpsd.methods.dpsd import DPSD
from dpsd.models import build_classifier
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger

STUDENT = torch.tensor([[3.0, 2.0, 1.0, 0.0],   # top-2 {0, 1}
                        [0.0, 1.0, 2.0, 3.0],   # top-2 {3, 2}
                        [5.0, 4.0, 3.0, 2.0]])  # top-2 {0, 1}


def test_the_share_counts_the_rows_whose_teacher_class_is_in_the_students_top_k():
    assert topk_survival(torch.tensor([2, 0, 1]), STUDENT, 2).item() == pytest.approx(1 / 3)  # row 3 only
    assert topk_survival(torch.tensor([1, 2, 0]), STUDENT, 2).item() == pytest.approx(1.0)
    assert topk_survival(torch.tensor([2, 0, 1]), STUDENT, 4).item() == 1.0  # k = c: every class is kept


def test_the_run_and_each_tenth_of_its_annotations_get_their_mean_share():
    shares = [torch.tensor(0.0)] * 4 + [torch.tensor(0.5)] * 8 + [torch.tensor(1.0)] * 8  # 20 annotations: 2 a tenth
    metrics = survival_metrics(shares)
    assert metrics[SURVIVAL] == pytest.approx((4 * 0.0 + 8 * 0.5 + 8 * 1.0) / 20)
    tenths = [metrics[f"{SURVIVAL}_tenth_{i:02d}"] for i in range(1, PHASES + 1)]
    assert tenths == pytest.approx([0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0])
    few = survival_metrics([torch.tensor(0.25), torch.tensor(0.75)])  # fewer annotations than tenths: none empty
    assert few == pytest.approx({SURVIVAL: 0.5, f"{SURVIVAL}_tenth_01": 0.25, f"{SURVIVAL}_tenth_02": 0.75})
    assert survival_metrics([]) == {}


@pytest.mark.parametrize("epsilon", [1.0, math.inf])
def test_the_annotator_records_the_share_and_answers_as_the_mechanism_does_from_the_same_random_state(epsilon):
    """Counting draws no random number: the annotator's labels equal Eq. (5)'s from a generator in the same state.
    Without noise (R4) an answer is the teacher's class exactly where it survived."""
    cfg = compose(["dataset=digits", "privacy=label", "privacy.k=3", f"privacy.epsilon={epsilon}"])
    torch.manual_seed(0)
    teacher, student = torch.randn(512, 10), torch.randn(512, 10)
    annotator = PrivateAnnotator(cfg, 10, torch.Generator().manual_seed(7), Ledger())
    answers = annotator(teacher, student).argmax(dim=1)
    expected, _ = mechanisms.topk_randomized_response(teacher.argmax(dim=1), student, 3, epsilon,
                                                      torch.Generator().manual_seed(7))
    assert torch.equal(answers, expected)
    inside = (student.topk(3, dim=1).indices == teacher.argmax(dim=1, keepdim=True)).any(dim=1).float().mean()
    assert [share.item() for share in annotator.survival] == [pytest.approx(inside.item())]
    if math.isinf(epsilon):
        assert (answers == teacher.argmax(dim=1)).float().mean().item() == pytest.approx(inside.item())


def trainer(*overrides, method=DPSD):
    cfg = resolve_paths(compose(["dataset=digits", "tracking=none", "device=cpu", "++method.batch_size=16",
                                 "method.iterations=3", *overrides]))
    resolve_run(cfg)
    data = load_data(cfg)
    torch.manual_seed(0)
    teacher = build_classifier("small_cnn", 1, data.image_size, 10).eval()
    ctx = RunContext(cfg=cfg, data=data, teachers=[teacher], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    return method().make_trainer(ctx), ctx


def test_a_label_run_logs_each_steps_share_and_its_runs_and_a_data_run_none():
    run, ctx = trainer("method=dpsd", "privacy=label", "method.update_order=generator_first")
    steps = [run.step() for _ in range(3)]
    shares = run.survival_shares()
    assert len(shares) == 6  # generator first: two annotations a step
    for index, metrics in enumerate(steps):  # the progress log's value: the mean of the step's two annotations
        assert metrics[SURVIVAL].item() == pytest.approx(torch.stack(shares[2 * index:2 * index + 2]).mean().item())
    result = DPSD().result(ctx, run, steps[-1]).metrics
    assert result[SURVIVAL] == pytest.approx(torch.stack(shares).mean().item())
    assert result[f"{SURVIVAL}_tenth_01"] == pytest.approx(shares[0].item())
    data, ctx = trainer("method=dpsd", "privacy=data")
    assert SURVIVAL not in data.step() and SURVIVAL not in DPSD().result(ctx, data, {}).metrics


def test_dpdfds_direct_training_a_trainer_without_alg_1s_loop_still_gets_dpsds_result():
    """DPDFD's direct training (a trainer of its own, data mode only) shares DPSD's result, read from its annotator."""
    direct, ctx = trainer("method=dpdfd_direct", "privacy=data", method=DPDFD)
    metrics = DPDFD().result(ctx, direct, direct.step()).metrics
    assert "final_student_loss" in metrics and SURVIVAL not in metrics
