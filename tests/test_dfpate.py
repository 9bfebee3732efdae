"""dfpate: data-free PATE. Its queries are rendered, never read from the private split; its ensemble answers as one
batched model; its answers are released through a data-independent aggregate under teacher_partition."""

import math

import pytest
import torch
from omegaconf import OmegaConf

from dpsd.config import compose
from dpsd.distill.transfer_sets import TRANSFER_SETS, transfer_images
from dpsd.ensembles import ensemble_votes, member_predictions, vote_counts
from dpsd.errors import ConfigError
from dpsd.experiment import run_experiment
from dpsd.input_space import InputSpace
from dpsd.methods.dfpate import brier_loss, soft_cross_entropy, student_targets
from dpsd.models import build_classifier


def dfpate_cfg(tmp_path, *extra):
    return compose(["method=dfpate", "dataset=digits", "method.num_teachers=20", "method.queries=100",
                    "method.member_steps=20", "method.epochs=2", "privacy.epsilon=5", "privacy.calibrate=rigorous",
                    "device=cpu", "tracking=none", f"results_dir={tmp_path}", *extra])


@pytest.mark.parametrize("name", sorted(TRANSFER_SETS.names()))
def test_every_transfer_set_renders_seeded_images_in_the_input_space(name):
    space = InputSpace()
    first = transfer_images(name, 7, 3, 28, space, torch.Generator().manual_seed(1))
    again = transfer_images(name, 7, 3, 28, space, torch.Generator().manual_seed(1))
    assert first.shape == (7, 3, 28, 28) and torch.equal(first, again)
    assert first.min() >= -1 and first.max() <= 1 and first.std() > 0
    assert torch.equal(first[:, 0], first[:, 2])  # grey, repeated for colour data


def test_an_unknown_transfer_set_is_one_line_naming_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown transfer set 'leaves'; known: dead_leaves, fractals, mixed, noise, strokes"):
        run_experiment(dfpate_cfg(tmp_path, "method.transfer=leaves"), show_progress=False)


def test_more_teachers_than_records_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="method.num_teachers=5000: the private split of 1437 records allows 1 to 1437"):
        run_experiment(dfpate_cfg(tmp_path, "method.num_teachers=5000"), show_progress=False)


def test_an_epsilon_the_mechanism_cannot_reach_is_one_line(tmp_path):
    """Confident-GNMax's threshold check keeps its sigma1: at sigma1 = 2 its 100 checks alone cost eps 33.1."""
    with pytest.raises(ConfigError, match=r"target epsilon 5 is out of reach; the rigorous ledger spans \[33.1"):
        run_experiment(dfpate_cfg(tmp_path, "method.confident_threshold=10", "method.sigma1=2"), show_progress=False)


def test_the_batched_ensemble_answers_as_its_members_do_one_by_one():
    torch.manual_seed(0)
    members = [build_classifier("pooled_mlp", 1, 8, 10, False) for _ in range(7)]
    images = torch.randn(33, 1, 8, 8)
    soft, hard = ensemble_votes(members, images, torch.device("cpu"), chunk=3, batch_size=10)
    assert torch.equal(hard, vote_counts(member_predictions(members, images, torch.device("cpu")), 10))
    expected = torch.stack([member(images).softmax(dim=1) for member in members]).sum(dim=0)
    assert torch.allclose(soft, expected, atol=1e-5)


def test_student_targets_are_distributions():
    noisy = torch.tensor([[3.0, -1.0, 1.0], [-2.0, -1.0, -0.5]])
    soft = student_targets(noisy, "soft", 3)
    assert torch.allclose(soft[0], torch.tensor([0.75, 0.0, 0.25])) and torch.allclose(soft[1], torch.full((3,), 1 / 3))
    assert torch.equal(student_targets(noisy, "hard", 3), torch.tensor([[1.0, 0, 0], [0, 0, 1.0]]))
    assert torch.equal(student_targets(noisy, "regress", 4), noisy / 4)  # negative totals kept: unbiased


def test_the_regress_target_learns_what_the_answers_without_noise_teach_and_the_soft_one_does_not():
    """Over noise of mean 0 (here each draw and its mirror image), the squared loss's gradient on the noisy answers is
    its gradient on the clean mean vote; the soft target's clipping moves it."""
    torch.manual_seed(0)
    clean = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]) * 50  # 50 members' summed soft votes
    draws = torch.randn(200, *clean.shape) * 40
    noisy = torch.cat([clean + draws, clean - draws])

    def mean_gradient(criterion, target):
        logits = torch.zeros(2, 3, requires_grad=True)
        loss = sum(criterion(logits, student_targets(answer, target, 50)) for answer in noisy) / len(noisy)
        return torch.autograd.grad(loss, logits)[0]

    def clean_gradient(criterion):
        logits = torch.zeros(2, 3, requires_grad=True)
        return torch.autograd.grad(criterion(logits, clean / 50), logits)[0]

    assert torch.allclose(mean_gradient(brier_loss, "regress"), clean_gradient(brier_loss), atol=1e-6)
    assert not torch.allclose(mean_gradient(soft_cross_entropy, "soft"), clean_gradient(soft_cross_entropy), atol=1e-2)


@pytest.mark.parametrize("extra", [[], ["method.votes=hard", "method.target=hard"], ["method.target=regress"],
                                   ["method.confident_threshold=10", "method.sigma1=30"], ["method.aggregator=lnmax"]],
                         ids=["soft", "hard", "regress", "confident", "lnmax"])
def test_a_run_reads_no_private_record_and_publishes_the_target_epsilon(tmp_path, extra):
    summary = run_experiment(dfpate_cfg(tmp_path, *extra), show_progress=False)
    metrics, privacy = summary["metrics"], summary["privacy"]
    assert metrics["private_image_reads"] == 0 and metrics["private_label_reads"] == 0  # data-free, as counted
    assert metrics["teacher_answers"] == 0 and metrics["member_answers_max"] == 100  # scoring the members is not counted
    assert 0.3 < metrics["ensemble_test_accuracy"] <= 1  # their clean vote on the test split, well above chance
    assert privacy["neighbouring"] == "teacher_partition"
    assert privacy["eps_rigorous"] <= 5 and privacy["eps_rigorous"] == pytest.approx(5, rel=0.01) or extra[:1] == [
        "method.confident_threshold=10"]  # a confident run's ledger charges the answered queries only
    assert math.isfinite(privacy["eps_claimed"]) and privacy["eps_claimed"] >= privacy["eps_rigorous"] - 1e-6


@pytest.mark.parametrize("extra", [[], ["method.aggregator=lnmax"]], ids=["gnmax", "lnmax"])
def test_dfpate_with_each_round_of_noisy_votes_recorded_as_one_answer_is_refused(tmp_path, monkeypatch, extra):
    """The edit the boundary exists for, made to dfpate: each round's aggregate (Gaussian or Laplace) recorded as
    ``count=1``, which the accountants would publish far below the honest ledger's epsilon. Its members answered 100
    queries each in two rounds; the two releases cover 2 of them."""
    import dataclasses

    from dpsd.methods import dfpate

    real = dfpate.noisy_votes

    def recorded_as_one(votes, cfg, rng):
        noisy, event = real(votes, cfg, rng)
        return noisy, dataclasses.replace(event, count=1)

    monkeypatch.setattr(dfpate, "noisy_votes", recorded_as_one)
    with pytest.raises(ConfigError, match="an ensemble member answered 100 inputs, but the releases of its answers "
                                          "cover 2") as refused:
        run_experiment(dfpate_cfg(tmp_path, "privacy.calibrate=off", *extra), show_progress=False)
    assert "\n" not in str(refused.value) and str(refused.value).endswith("nothing was published")


def test_diet_pate_reading_reports_its_data_dependent_epsilon_beside_ours(tmp_path):
    summary = run_experiment(dfpate_cfg(tmp_path, "method.votes=hard", "method.data_dependent=true"), show_progress=False)
    assert 0 < summary["metrics"]["eps_data_dependent"] and summary["privacy"]["eps_rigorous"] == pytest.approx(5, rel=0.01)
    assert any("not be published" in note for note in summary["privacy"]["notes"])


def test_the_data_dependent_epsilon_needs_vote_counts(tmp_path):
    with pytest.raises(ConfigError, match="method.data_dependent needs GNMax on vote counts"):
        run_experiment(dfpate_cfg(tmp_path, "method.data_dependent=true"), show_progress=False)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The default run the switches below are compared with."""
    return run_experiment(dfpate_cfg(tmp_path_factory.mktemp("plain")), show_progress=False)


def test_rotation_pretraining_changes_the_student_and_costs_no_privacy(tmp_path, plain):
    pretrained = run_experiment(dfpate_cfg(tmp_path, "method.pretrain=rotation", "method.pretrain_images=256",
                                           "method.pretrain_epochs=1"), show_progress=False)
    assert pretrained["metrics"]["member_answers_max"] == plain["metrics"]["member_answers_max"] == 100
    assert pretrained["privacy"]["eps_rigorous"] == plain["privacy"]["eps_rigorous"]
    assert pretrained["metrics"]["final_student_loss"] != plain["metrics"]["final_student_loss"]


def test_the_mixed_set_deals_strokes_leaves_and_fractals_in_equal_shares():
    from dpsd.distill import transfer_sets

    mixed = transfer_sets.mixed(7, 28, torch.Generator().manual_seed(3))
    rng = torch.Generator().manual_seed(3)
    parts = [transfer_sets.strokes(3, 28, rng), transfer_sets.dead_leaves(2, 28, rng), transfer_sets.fractals(2, 28, rng)]
    assert sorted(map(_key, mixed)) == sorted(map(_key, torch.cat(parts)))


def _key(image):
    return tuple(image.flatten().tolist())


def test_random_affine_moves_each_image_by_its_own_map_and_keeps_a_still_image():
    from dpsd.augment import random_affine

    flat = torch.full((4, 1, 28, 28), -1.0)  # the input space's black: nothing to move
    assert torch.allclose(random_affine(flat, torch.Generator().manual_seed(0)), flat)
    dot = torch.full((64, 1, 28, 28), -1.0)
    dot[:, :, 12:16, 12:16] = 1.0
    moved = random_affine(dot, torch.Generator().manual_seed(0))
    again = random_affine(dot, torch.Generator().manual_seed(0))
    assert torch.equal(moved, again) and moved.shape == dot.shape
    centres = [tuple((m[0] > 0).nonzero().float().mean(dim=0).round().tolist()) for m in moved]
    assert len(set(centres)) > 8  # shifted by a map of its own, not one map for the batch
    assert all(abs(r - 13.5) <= 3.5 and abs(c - 13.5) <= 3.5 for r, c in centres)  # by at most 0.1 of the side, turned


def test_augmentation_changes_the_student_and_costs_no_privacy(tmp_path, plain):
    moved = run_experiment(dfpate_cfg(tmp_path, "method.augment=affine"), show_progress=False)
    assert moved["metrics"]["member_answers_max"] == plain["metrics"]["member_answers_max"] == 100
    assert moved["privacy"]["eps_rigorous"] == plain["privacy"]["eps_rigorous"]
    assert moved["metrics"]["final_student_loss"] != plain["metrics"]["final_student_loss"]


def test_averaged_students_change_the_released_one_and_cost_no_privacy(tmp_path, plain):
    averaged = run_experiment(dfpate_cfg(tmp_path, "method.students=2", "method.distill_images=64"), show_progress=False)
    assert averaged["metrics"]["private_image_reads"] == 0 and averaged["metrics"]["private_label_reads"] == 0
    assert averaged["metrics"]["member_answers_max"] == plain["metrics"]["member_answers_max"] == 100
    assert averaged["privacy"]["eps_rigorous"] == plain["privacy"]["eps_rigorous"]
    assert averaged["metrics"]["final_student_loss"] != plain["metrics"]["final_student_loss"]


@pytest.mark.parametrize("bad", ["method.students=0", "method.distill_images=0"])
def test_no_student_or_no_distillation_image_is_one_line(tmp_path, bad):
    with pytest.raises(ConfigError, match=r"method.students=\d+ method.distill_images=\d+: both must be at least 1"):
        run_experiment(dfpate_cfg(tmp_path, bad), show_progress=False)


def test_even_shares_split_a_total_as_evenly_as_can_be():
    from dpsd.distill.transfer_sets import even_shares

    assert even_shares(10, 3) == [4, 3, 3] and even_shares(500, 1) == [500] and even_shares(7, 7) == [1] * 7
    assert even_shares(2, 3) == [1, 1, 0]


def test_class_balanced_picks_take_each_class_most_typical_images_once():
    from dpsd.methods.dfpate import class_balanced_picks

    class Fixed(torch.nn.Module):  # logits read off the image itself
        def forward(self, x):
            return x.flatten(1)

    pool = torch.eye(3).repeat(4, 1) * torch.arange(1, 13).float().unsqueeze(1)  # image i points at class i % 3
    picks = class_balanced_picks(Fixed(), pool, 5, 3, torch.device("cpu"))
    assert len(set(picks.tolist())) == 5
    assert picks[:2].tolist() == [9, 6] and picks[2:4].tolist() == [10, 7] and picks[4:].tolist() == [11]


def test_rounds_ask_the_same_queries_in_all_and_cost_what_one_round_costs(tmp_path):
    one = run_experiment(dfpate_cfg(tmp_path, "method.rounds=1"), show_progress=False)
    two = run_experiment(dfpate_cfg(tmp_path, "method.rounds=2", "method.pool=4"), show_progress=False)
    assert two["metrics"]["private_image_reads"] == 0 and two["metrics"]["private_label_reads"] == 0
    assert two["metrics"]["answered_queries"] == one["metrics"]["answered_queries"] == 100
    assert two["privacy"]["eps_rigorous"] == pytest.approx(one["privacy"]["eps_rigorous"], rel=1e-9)


def test_more_rounds_than_queries_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"method.rounds=101 method.pool=10: rounds must be 1 to method.queries \(100\)"):
        run_experiment(dfpate_cfg(tmp_path, "method.rounds=101"), show_progress=False)


def test_diet_pate_train_mode_scoring_is_flagged_and_reads_each_batch_own_statistics(tmp_path):
    from dpsd.methods.dfpate import TRAIN_MODE_NOTE, TestBatchStatistics

    torch.manual_seed(0)
    student = build_classifier("small_cnn", 1, 8, 10, False)  # BatchNorm layers (the DataLens CNN has none)
    wrapped = TestBatchStatistics(student).eval()
    batch = torch.randn(16, 1, 8, 8) * 3 + 2
    learnt = lambda: {k: v.clone() for k, v in student.state_dict().items() if not k.endswith("num_batches_tracked")}
    before = learnt()
    with torch.no_grad():
        alone, together = wrapped(batch[:4]), wrapped(batch)[:4]
    assert not torch.allclose(alone, together)  # the score of an image depends on the batch it came in
    assert all(torch.equal(before[k], v) for k, v in learnt().items())  # no statistic kept from the test split
    summary = run_experiment(dfpate_cfg(tmp_path, "method.student_eval=train"), show_progress=False)
    assert TRAIN_MODE_NOTE in summary["privacy"]["notes"]


def test_augmented_members_change_the_answers_and_cost_no_privacy(tmp_path, plain):
    moved = run_experiment(dfpate_cfg(tmp_path, "method.member_augment=affine"), show_progress=False)
    assert moved["metrics"]["private_image_reads"] == 0 and moved["metrics"]["private_label_reads"] == 0
    assert moved["metrics"]["member_answers_max"] == plain["metrics"]["member_answers_max"] == 100
    assert moved["privacy"]["eps_rigorous"] == plain["privacy"]["eps_rigorous"]
    assert moved["metrics"]["ensemble_test_accuracy"] != plain["metrics"]["ensemble_test_accuracy"]


def test_dreamed_queries_change_the_answers_and_cost_no_privacy_and_keep_a_cell_s_hash(tmp_path):
    from dpsd.cell_identity import config_hash

    dreamed = run_experiment(dfpate_cfg(tmp_path, "method.rounds=2", "method.pool=2", "method.dream_steps=3"),
                             show_progress=False)
    drawn = run_experiment(dfpate_cfg(tmp_path, "method.rounds=2", "method.pool=2"), show_progress=False)
    assert dreamed["metrics"]["private_image_reads"] == 0 and dreamed["metrics"]["private_label_reads"] == 0
    assert dreamed["metrics"]["member_answers_max"] == drawn["metrics"]["member_answers_max"] == 100
    assert dreamed["privacy"]["eps_rigorous"] == drawn["privacy"]["eps_rigorous"]
    assert dreamed["metrics"]["vote_margin"] != drawn["metrics"]["vote_margin"]
    without = OmegaConf.to_container(dfpate_cfg(tmp_path))
    for key in ("dream_steps", "dream_lr", "dream_tv"):  # runs recorded before the switch keep their cells
        del without["method"][key]
    assert config_hash(dfpate_cfg(tmp_path)) == config_hash(OmegaConf.create(without))
    assert config_hash(dfpate_cfg(tmp_path, "method.dream_steps=3")) != config_hash(dfpate_cfg(tmp_path))


def test_dreaming_moves_each_image_toward_its_class_within_the_pixel_range(tmp_path):
    from types import SimpleNamespace

    from dpsd.input_space import input_space
    from dpsd.methods.dfpate import dreamed, picked_classes

    torch.manual_seed(0)
    student = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))
    images = torch.rand(8, 1, 8, 8) * 2 - 1
    classes = picked_classes(8, 4)
    assert classes.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    ctx = SimpleNamespace(cfg=compose(["method=dfpate", "method.dream_steps=30", "method.dream_tv=0"]),
                          data=SimpleNamespace(space=input_space("minus_one_one", "digits")), device=torch.device("cpu"))
    moved = dreamed(student, images, classes, ctx)
    loss = torch.nn.functional.cross_entropy
    assert loss(student(moved), classes) < loss(student(images), classes)
    assert moved.min() >= -1 and moved.max() <= 1 and not torch.equal(moved, images)
    assert all(p.requires_grad for p in student.parameters())  # the student is left as it was


@pytest.mark.parametrize("bad", ["method.dream_steps=-1", "method.dream_lr=0", "method.dream_tv=-0.1"])
def test_a_negative_dream_setting_is_one_line(tmp_path, bad):
    with pytest.raises(ConfigError, match=r"method.dream_steps=.* must be at least 0, the rate above 0"):
        run_experiment(dfpate_cfg(tmp_path, bad), show_progress=False)
