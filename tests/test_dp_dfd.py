"""DP-DFD (dpsd/methods/dp_dfd.py): selective randomized response, its ledger, and tiny runs."""

import math

import pytest
import torch
from torch import nn

from dpsd.config import compose
from dpsd.data import DataInfo
from dpsd.errors import ConfigError
from dpsd.experiment import privacy_report, run_experiment
from dpsd.methods.dp_dfd import DpDfd, DpDfdTrainer, selection_threshold, steps_per_stage
from dpsd.privacy import claims
from dpsd.privacy.accounting import rigorous_epsilon
from dpsd.privacy.events import RandomizedResponseRelease, UnprotectedRelease
from dpsd.privacy.mechanisms import selective_index_set, selective_randomized_response

INFO = DataInfo(num_classes=10, channels=1, image_size=8)
TEACHER = ["model.teacher.recipe.steps=30", "device=cpu", "tracking=none"]
TINY = ["method.stages=2", "method.samples_per_stage=48", "method.student_epochs=1", "method.batch_size=16",
        "method.pretrain_iterations=2"]


def keep(epsilon, k):
    return math.exp(epsilon) / (math.exp(epsilon) + k - 1)


def test_index_set_is_the_threshold_set_with_at_least_the_top_two():
    prior = torch.tensor([
        [0.40, 0.30, 0.20, 0.06, 0.04],  # three above 0.1
        [0.90, 0.04, 0.03, 0.02, 0.01],  # one above: top two
        [0.20, 0.20, 0.20, 0.20, 0.20],  # all above
        [0.02, 0.05, 0.03, 0.80, 0.10],  # 0.10 is not > 0.1: top two {3, 4}
    ])
    expected = torch.tensor([
        [1, 1, 1, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1],
        [0, 0, 0, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(selective_index_set(prior, 0.1), expected)
    above_all = selective_index_set(prior, 0.95)  # no entry above: the top two of each row
    assert torch.equal(above_all.sum(dim=1), torch.full((4,), 2))
    assert torch.equal(above_all[[0, 1, 3]], expected[[1, 1, 3]])


def test_threshold_is_half_over_classes_by_default():
    cfg = compose(["method=dp_dfd"])
    assert selection_threshold(cfg, 10) == 0.05
    assert selection_threshold(compose(["method=dp_dfd", "method.threshold=0.2"]), 10) == 0.2
    with pytest.raises(ConfigError, match="paper"):
        selection_threshold(compose(["method=dp_dfd", "method.threshold=1.5"]), 10)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_selective_rr_output_probabilities(epsilon):
    """Exact law per row: RR over I (k = 2, 3, 5) when r in I, Uniform(I) when r is outside."""
    prior = torch.tensor([
        [0.90, 0.04, 0.03, 0.02, 0.01],  # I = {0, 1}, r = 1 in I
        [0.40, 0.30, 0.20, 0.06, 0.04],  # I = {0, 1, 2}, r = 2 in I
        [0.20, 0.20, 0.20, 0.20, 0.20],  # I = all, r = 4 in I
        [0.40, 0.30, 0.20, 0.06, 0.04],  # I = {0, 1, 2}, r = 3 outside: uniform over I
    ])
    truth = torch.tensor([1, 2, 4, 3])
    expected = torch.tensor([
        [1 - keep(epsilon, 2), keep(epsilon, 2), 0, 0, 0],
        [(1 - keep(epsilon, 3)) / 2] * 2 + [keep(epsilon, 3), 0, 0],
        [(1 - keep(epsilon, 5)) / 4] * 4 + [keep(epsilon, 5)],
        [1 / 3, 1 / 3, 1 / 3, 0, 0],
    ], dtype=torch.float64)
    n = 100_000
    rng = torch.Generator().manual_seed(1)
    answers, event = selective_randomized_response(truth.repeat(n), prior.repeat(n, 1), 0.1, epsilon, rng)
    assert (event.epsilon, event.num_buckets, event.count) == (epsilon, 2, 4 * n)
    answers = answers.view(n, 4)
    for row in range(4):
        freq = torch.bincount(answers[:, row], minlength=5).double() / n
        assert torch.all(freq[expected[row] == 0] == 0), row  # never outside I
        tolerance = 5 * torch.sqrt(expected[row] * (1 - expected[row]) / n)  # 5 binomial sigmas
        assert torch.all((freq - expected[row]).abs() <= tolerance + 1e-12), (row, freq, expected[row])


def test_selective_rr_at_huge_epsilon_answers_the_truth_inside_and_uniform_outside():
    prior = torch.tensor([[0.40, 0.30, 0.20, 0.06, 0.04]]).repeat(3000, 1)
    rng = torch.Generator().manual_seed(0)
    inside, _ = selective_randomized_response(torch.full((3000,), 1), prior, 0.1, 1e4, rng)
    assert torch.all(inside == 1)
    outside, _ = selective_randomized_response(torch.full((3000,), 4), prior, 0.1, 1e4, rng)
    assert set(outside.tolist()) == {0, 1, 2}


def _hockey_stick(p, q, eps_prime):
    return float(torch.clamp(p - math.exp(eps_prime) * q, min=0).sum())


@pytest.mark.parametrize("k", [2, 3, 10])
def test_binary_rr_dominates_every_pair_of_selective_rr_answers(k):
    """The ledger's argument: every pair of answer laws for two teacher classes, with the same I of
    size k, has a hockey-stick divergence no larger than binary RR_eps's, at every eps' >= 0."""
    epsilon = 1.0
    p_keep, p_other = keep(epsilon, k), (1 - keep(epsilon, k)) / (k - 1)
    rr = lambda r: torch.tensor([p_keep if j == r else p_other for j in range(k)], dtype=torch.float64)
    uniform = torch.full((k,), 1 / k, dtype=torch.float64)
    binary = (torch.tensor([keep(epsilon, 2), 1 - keep(epsilon, 2)], dtype=torch.float64),
              torch.tensor([1 - keep(epsilon, 2), keep(epsilon, 2)], dtype=torch.float64))
    pairs = [(rr(0), rr(1)), (rr(0), uniform), (uniform, rr(0))]
    for eps_prime in [0.0, 0.1, 0.5, 0.9]:
        bound = _hockey_stick(*binary, eps_prime)
        for p, q in pairs:
            assert _hockey_stick(p, q, eps_prime) <= bound + 1e-12
    for p, q in pairs:  # and each is eps-DP
        assert float((p / q).log().abs().max()) <= epsilon + 1e-12


def test_claim_is_the_per_answer_epsilon_as_label_dp():
    claim = claims.dp_dfd_label_dp(2.5)
    assert (claim.epsilon, claim.delta, claim.notion) == (2.5, 0.0, "eps-label-DP")
    assert "DP-DFD" in claim.source
    with pytest.raises(ConfigError):
        claims.dp_dfd_label_dp(-1.0)


def test_ledger_counts_stages_times_samples_and_every_teacher_read():
    cfg = compose(["method=dp_dfd", "privacy.query_epsilon=3.0", "method.stages=7", "method.samples_per_stage=300",
                   "method.batch_size=100", "method.student_epochs=2", "method.pretrain_iterations=11",
                   "method.keep_answer=onehot", "method.finetune_eq2=teacher"])
    assert steps_per_stage(cfg) == 6 and DpDfd.total_steps(cfg) == 42
    ledger = DpDfd.plan_ledger(cfg, INFO)
    events = ledger.events
    assert [type(e) for e in events] == [UnprotectedRelease, RandomizedResponseRelease, UnprotectedRelease]
    assert events[0].count == 11  # pre-training
    assert (events[1].count, events[1].epsilon, events[1].num_buckets) == (2100, 3.0, 2)
    assert events[2].count == 42  # fine-tuning with Eq. (2) on the teacher
    summary = ledger.summary(1e-5)
    assert summary["eps_claimed"] == 3.0 and summary["eps_rigorous"] == math.inf
    assert summary["queries"] == 11 + 2100 + 42
    assert any("not covered" in note for note in summary["notes"])


def test_without_teacher_reads_the_rigorous_ledger_is_binary_rr_composed():
    cfg = compose(["method=dp_dfd", "privacy.query_epsilon=0.01", "method.stages=3", "method.samples_per_stage=50",
                   "method.pretrain_iterations=0", "method.finetune_eq2=off", "method.keep_answer=onehot"])
    summary = DpDfd.plan_ledger(cfg, INFO).summary(1e-5)
    expected = rigorous_epsilon([RandomizedResponseRelease(epsilon=0.01, num_buckets=2, count=150)], 1e-5)
    assert summary["eps_rigorous"] == pytest.approx(expected["eps_rigorous"])
    assert 0.01 < summary["eps_rigorous"] < 1.5  # composed over 150 answers, finite
    assert not any("inf" in note or "not covered" in note for note in summary["notes"])


def test_the_defaults_are_the_readings_pick_and_their_soft_answers_are_unprotected():
    """conf/method/dp_dfd.yaml holds the full R5 readings search's pick (sweeps/readings_dp_dfd_full.yaml and its
    confirmation): the teacher's soft y_t kept, Eq. (2) kept on the teacher in the fine-tuning. No randomized
    response covers a soft answer: every release is unprotected, so the rigorous ledger is infinite however the
    fine-tuning reads."""
    default = compose(["method=dp_dfd"])
    assert (default.method.keep_answer, default.method.finetune_eq2) == ("soft", "teacher")
    ledger = DpDfd.plan_ledger(default, INFO)
    assert ledger.events and all(isinstance(e, UnprotectedRelease) for e in ledger.events)
    assert ledger.summary(1e-5)["eps_rigorous"] == math.inf


def test_unsupported_modes():
    with pytest.raises(ConfigError, match="privacy=label or privacy=none"):
        DpDfd.check_config(compose(["method=dp_dfd", "privacy=data"]))
    with pytest.raises(ConfigError, match="keep_answer"):
        DpDfd.check_config(compose(["method=dp_dfd", "method.keep_answer=maybe"]))


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dp_dfd")


@pytest.mark.parametrize("switches", [
    [],
    ["method.keep_answer=onehot", "method.finetune_eq2=teacher", "method.threshold=0.3"],
    ["method.generator_loss.onehot=0", "method.generator_loss.student_loss=maximize"],  # Table III: no CE
    ["method.generator_loss.entropy=0", "method.generator_loss.bn_statistics=0"],  # Table III: no IE, no Norm
    ["method.pretrain_iterations=0", "method.keep_answer=onehot", "method.finetune_eq2=off",
     "method.generator_loss.student_loss=off"],
    ["privacy=none"],
])
def test_tiny_digits_run_fills_the_ledger_it_planned(results_dir, run_as_planned, switches):
    cfg = compose(["method=dp_dfd", f"results_dir={results_dir}", *TEACHER, *TINY, *switches])
    _, ledger = run_as_planned(cfg)
    if "privacy=none" in switches:
        assert ledger["eps_claimed"] == math.inf
    elif "method.pretrain_iterations=0" in switches:
        assert math.isfinite(ledger["eps_rigorous"])


class CountingTeacher(nn.Module):
    """Wraps a teacher and counts the samples it answers."""

    def __init__(self, teacher):
        super().__init__()
        self.teacher, self.answered = teacher, 0

    def forward(self, x):
        self.answered += len(x)
        return self.teacher(x)


def test_labels_are_queried_once_per_stage_and_reused(results_dir):
    from dpsd.data import load_data
    from dpsd.methods.base import RunContext
    from dpsd.privacy.accounting import Ledger
    from dpsd.teachers import load_or_train_teacher
    from dpsd.config import resolve_paths

    cfg = resolve_paths(compose(["method=dp_dfd", f"results_dir={results_dir}", *TEACHER, *TINY,
                                 "method.pretrain_iterations=0", "method.keep_answer=onehot",
                                 "method.finetune_eq2=off"]))  # the teacher answers the labelling only
    data = load_data(cfg)
    teacher, _ = load_or_train_teacher(cfg, data, torch.device("cpu"))
    counting = CountingTeacher(teacher)
    ctx = RunContext(cfg=cfg, data=data, teachers=[counting], device=torch.device("cpu"),
                     rng=torch.Generator().manual_seed(0), ledger=Ledger())
    trainer = DpDfdTrainer(ctx)
    trainer.step()
    targets = trainer.targets
    assert counting.answered == 48 and targets.shape == (48, 10)
    for _ in range(steps_per_stage(cfg) - 1):
        trainer.step()
    assert counting.answered == 48 and trainer.targets is targets  # reused within the stage
    trainer.step()  # the second stage labels a fresh set
    assert counting.answered == 96 and trainer.targets is not targets
    assert ctx.ledger.queries == 96
    assert torch.all(trainer.targets.sum(dim=1) == 1)  # one-hot answers


def test_a_teacher_without_batchnorm_is_refused_before_any_compute_while_eq2_reads_its_statistics():
    """Eq. (2)'s third term reads the teacher's BatchNorm: DAFL's LeNet-5 has none (the first readings spec that
    tried it failed once its teachers were loaded); without the term, or without a generator to train, the teacher
    is accepted."""
    lenet5 = ["method=dp_dfd", "dataset=mnist", "privacy=label", "model/teacher=lenet5", "model.teacher.arch=lenet5"]
    with pytest.raises(ConfigError, match="model.teacher.arch=lenet5 has none"):
        DpDfd.check_config(compose(lenet5))
    DpDfd.check_config(compose([*lenet5, "method.generator_loss.bn_statistics=0"]))
    DpDfd.check_config(compose([*lenet5, "model/generator=gaussian_noise"]))
    DpDfd.check_config(compose(["method=dp_dfd", "dataset=mnist", "privacy=label"]))  # the small CNN has BatchNorm
