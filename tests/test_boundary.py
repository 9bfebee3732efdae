"""The privacy boundary: an adapter cannot publish a false epsilon, whatever it forgets or declares.

Each planted adapter below is what a researcher gets from LP-1ST with one edit (``dpsd new method NAME --from
lp1st``), run on the embedded digits at ``privacy=label privacy.epsilon=1``. Before the boundary, the first two
published eps_rigorous 0.0 and the next three a finite, false one, all with exit 0. The runner now counts what each
touched (labels, images, teacher answers) and refuses it in one line naming the method, the access and the release
that is missing; nothing is published.
"""

import math

import pytest
import torch

from baselines.lp1st import IMAGES, LP1ST, label_epsilon
from baselines.training import RelabelledSplit, train_student
from dpsd.config import compose
from dpsd.data import sealed_labels, split_labels
from dpsd.errors import ConfigError
from dpsd.experiment import run_experiment
from dpsd.methods import METHODS
from dpsd.methods.base import RunResult
from dpsd.privacy import mechanisms
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.boundary import Accesses, reconcile
from dpsd.privacy.claims import Claim
from dpsd.privacy.events import GaussianRelease, LaplaceRelease, RandomizedResponseRelease


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("boundary")


def cfg_for(results_dir):
    return compose(["method=lp1st", "dataset=digits", "privacy=label", "privacy.epsilon=1", "method.epochs=1",
                    "model.teacher.recipe.steps=30", "device=cpu", "tracking=none", f"results_dir={results_dir}"])


def claim(cfg):
    return Claim(label_epsilon(cfg), 0.0, "eps-label-DP", "a planted adapter")


def teacher_labels(ctx, release_count: int, relation: str = "replace_record"):
    """The teacher's labels for every private image through randomized response, declared with ``release_count``."""
    train = ctx.data.train
    images = torch.stack([train.image(i) for i in range(len(train))])
    with torch.no_grad():
        answers = ctx.teachers[0](images).argmax(dim=1)
    noisy, _ = mechanisms.randomized_response(answers, ctx.info.num_classes, label_epsilon(ctx.cfg), ctx.rng)
    ctx.ledger.record(RandomizedResponseRelease(epsilon=label_epsilon(ctx.cfg), num_buckets=ctx.info.num_classes,
                                                count=release_count, relation=relation))
    return noisy


def trained_on_images(ctx, labels):
    """The student on the private images with ``labels``, the images release recorded."""
    ctx.ledger.record(IMAGES)
    student, _ = train_student(ctx, RelabelledSplit(ctx.data.train, labels))
    return RunResult(student=student, ledger=ctx.ledger)


class Forgets(LP1ST):
    """``fit`` never records its randomized-response release (the plan does)."""

    def fit(self, ctx):
        record = ctx.ledger.record
        ctx.ledger.record = lambda event: None if isinstance(event, RandomizedResponseRelease) else record(event)
        return super().fit(ctx)


class RawLabels(LP1ST):
    """Trains on the true labels; plans and records only the images release."""

    @staticmethod
    def plan_ledger(cfg, info):
        ledger = Ledger(claim=claim(cfg))
        ledger.record(IMAGES)
        return ledger

    def fit(self, ctx):
        return trained_on_images(ctx, torch.as_tensor(split_labels(ctx.data.train)))


class OneRelease(LP1ST):
    """Randomized response on the teacher's answers to every private image, declared as one release."""

    @staticmethod
    def plan_ledger(cfg, info):
        ledger = Ledger(claim=claim(cfg))
        ledger.record(RandomizedResponseRelease(epsilon=label_epsilon(cfg), num_buckets=info.num_classes))
        ledger.record(IMAGES)
        return ledger

    def fit(self, ctx):
        return trained_on_images(ctx, teacher_labels(ctx, release_count=1))


class PlanDiffers(OneRelease):
    """The plan counts one release an answer (it was given the split's size), ``fit`` records one in all: a plan
    may bound a run from above, so what refuses it is the answers its one release leaves uncovered."""

    @staticmethod
    def plan_ledger(cfg, info):
        ledger = Ledger(claim=claim(cfg))
        ledger.record(RandomizedResponseRelease(epsilon=label_epsilon(cfg), num_buckets=info.num_classes,
                                                count=info.records))
        ledger.record(IMAGES)
        return ledger


class WrongRelation(OneRelease):
    """The answers' release tagged teacher_partition, with the full-data teacher, the student on the raw images (a
    teacher_partition ledger takes records outside the partitions as public, so no images release is recorded)."""

    @staticmethod
    def plan_ledger(cfg, info):
        ledger = Ledger()
        ledger.record(RandomizedResponseRelease(epsilon=label_epsilon(cfg), num_buckets=info.num_classes,
                                                count=info.records, relation="teacher_partition"))
        return ledger

    def fit(self, ctx):
        noisy = teacher_labels(ctx, release_count=len(ctx.data.train), relation="teacher_partition")
        student, _ = train_student(ctx, RelabelledSplit(ctx.data.train, noisy))
        return RunResult(student=student, ledger=ctx.ledger)


class TwoPasses(LP1ST):
    """Our own: the labels drawn through randomized response twice (a second, fresher noisy copy), the
    event of the first pass recorded for both."""

    def fit(self, ctx):
        epsilon, classes = label_epsilon(ctx.cfg), ctx.info.num_classes
        noisy, event = mechanisms.randomized_response(sealed_labels(ctx.data.train), classes, epsilon, ctx.rng,
                                                      release="once")
        mechanisms.randomized_response(sealed_labels(ctx.data.train), classes, epsilon, ctx.rng, release="once")
        ctx.ledger.record(event)
        return trained_on_images(ctx, noisy)


class BeyondPlan(LP1ST):
    """Records the images release twice where its plan has it once: a run may stay below its plan, never above."""

    def fit(self, ctx):
        ctx.ledger.record(IMAGES)
        return super().fit(ctx)


PLANTED = {
    Forgets: "lp1st.*a mechanism consumed the private labels \\(RandomizedResponseRelease, 1 release\\), but the "
             "ledger records 0 of it",
    RawLabels: "read 1437 private labels as they are, through no mechanism",
    OneRelease: "the teacher answered 1437 inputs, but the releases under replace_record cover 1",
    PlanDiffers: "the teacher answered 1437 inputs, but the releases under replace_record cover 1",
    WrongRelation: "stated under teacher_partition, but no teacher of this run was trained on a disjoint partition",
    BeyondPlan: "its plan_ledger plans RandomizedResponseRelease x1, PrivateImagesRelease x1 but fit recorded "
                "PrivateImagesRelease x2, RandomizedResponseRelease x1",
    TwoPasses: "a mechanism consumed the private labels \\(RandomizedResponseRelease, 2 releases\\), but the ledger "
               "records 1 of it",
}


@pytest.mark.parametrize("adapter", list(PLANTED), ids=lambda cls: cls.__name__)
def test_a_planted_adapter_is_refused_in_one_line_naming_what_is_missing(results_dir, monkeypatch, adapter):
    monkeypatch.setitem(METHODS._entries, "lp1st", adapter)
    with pytest.raises(ConfigError, match=PLANTED[adapter]) as refused:
        run_experiment(cfg_for(results_dir), show_progress=False)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("privacy boundary: method 'lp1st'")
    assert message.endswith("nothing was published")


def test_lp1st_itself_passes_the_boundary_with_its_epsilon(results_dir):
    summary = run_experiment(cfg_for(results_dir), show_progress=False)["privacy"]
    assert summary["neighbouring"] == "label" and summary["eps_rigorous"] == pytest.approx(1.0, rel=1e-3)


def test_a_run_that_touched_the_data_never_publishes_zero():
    """Randomized response at eps 0 on the labels, the images released: honest, and still refused as 0."""
    from dpsd.privacy.boundary import zero_epsilon_shortfall

    touched = Accesses(records=3, image_reads=torch.ones(3, dtype=torch.int64).numpy(),
                       label_reads=torch.zeros(3, dtype=torch.int64).numpy())
    assert zero_epsilon_shortfall("m", touched, 0.0) and not zero_epsilon_shortfall("m", touched, 0.5)
    assert not zero_epsilon_shortfall("m", Accesses(), 0.0)


def test_no_release_at_all_is_infinite_already_and_so_not_a_shortfall():
    """A ledger with no release gives eps_rigorous = inf (the accountants fail closed): nothing to refuse."""
    accesses = Accesses(teacher_answers=10)
    assert reconcile("m", accesses, [], None, covers_images=False) == []
    assert reconcile("m", accesses, [RandomizedResponseRelease(epsilon=1.0, num_buckets=10, count=9)], None,
                     covers_images=False)
    assert math.isinf(Ledger().summary(1e-5)["eps_rigorous"])


# ------------------------------------------------------------------------------------------------
# Aggregates counted exactly: a Gaussian or Laplace release covers count x answers teacher answers, no more


def pate_cfg(results_dir, *extra):
    return compose(["method=pate", "dataset=digits", "privacy=label", "privacy.epsilon=1", "method.epochs=1",
                    "method.num_teachers=5", "method.queries=200", "model.teacher.recipe.steps=30", "device=cpu",
                    "tracking=none", f"results_dir={results_dir}", *extra])


def test_pate_recorded_honestly_publishes_its_epsilon(results_dir):
    summary = run_experiment(pate_cfg(results_dir), show_progress=False)
    assert summary["privacy"]["neighbouring"] == "teacher_partition"
    assert summary["privacy"]["eps_rigorous"] == pytest.approx(33.1, abs=0.05)  # GNMax sigma 4, 200 queries
    assert summary["metrics"]["member_answers_max"] == 200


def test_pate_with_its_noisy_votes_recorded_as_one_release_is_refused(results_dir, monkeypatch):
    """One edit a researcher might make: the GNMax event of 200 queries recorded as ``count=1`` (plan and run alike),
    which the accountants would publish as eps 1.36 where the honest ledger gives 33.1. The members answered 200
    queries each; the one release covers 1 of them."""
    import dataclasses

    from baselines import pate

    real = pate.noisy_votes
    monkeypatch.setattr(pate, "aggregator_release", lambda cfg: dataclasses.replace(
        pate.GaussianRelease(math.sqrt(2), float(cfg.method.sigma), count=1, note=pate.GNMAX_NOTE,
                             relation="teacher_partition")))
    monkeypatch.setattr(pate, "noisy_votes", lambda votes, cfg, rng: (real(votes, cfg, rng)[0],
                                                                       pate.aggregator_release(cfg)))
    with pytest.raises(ConfigError, match="an ensemble member answered 200 inputs, but the releases of its answers "
                                          "cover 1") as refused:
        run_experiment(pate_cfg(results_dir), show_progress=False)
    assert "\n" not in str(refused.value) and str(refused.value).endswith("nothing was published")


def teacher_probabilities(ctx):
    """The full-data teacher's softmax answers to every private image."""
    train = ctx.data.train
    with torch.no_grad():
        return ctx.teachers[0](torch.stack([train.image(i) for i in range(len(train))])).softmax(dim=1)


class OneAnswerAggregate(LP1ST):
    """Our own, two ways: the teacher's answers to every private image aggregated into one noisy release, the event
    recorded by hand as covering one answer (``release``, planned and recorded alike), each image then labelled from
    that release, the images release recorded. ``aggregate(ctx, answers)`` gives the labels."""

    release = None

    @classmethod
    def plan_ledger(cls, cfg, info):
        ledger = Ledger(claim=claim(cfg))
        ledger.record(cls.release)
        ledger.record(IMAGES)
        return ledger

    def fit(self, ctx):
        labels = self.aggregate(ctx, teacher_probabilities(ctx))
        ctx.ledger.record(self.release)
        return trained_on_images(ctx, labels)


class LaplaceMeanOnce(OneAnswerAggregate):
    """A class histogram of the teacher's argmax answers through Laplace noise, as if one answer."""

    release = LaplaceRelease(l1_sensitivity=2.0, scale=2.0)

    def aggregate(self, ctx, answers):
        votes = torch.nn.functional.one_hot(answers.argmax(dim=1), ctx.info.num_classes).sum(dim=0, keepdim=True)
        histogram, _ = mechanisms.laplace_mechanism(votes.float(), 2.0, 2.0, ctx.rng)
        return histogram.argmax(dim=1).expand(len(answers))


class NoisyMeanUndercounted(OneAnswerAggregate):
    """A noisy mean of the softmax answers through :func:`dpsd.privacy.mechanisms.noisy_mean`, whose own event counts
    the rows it summed, replaced by a hand-made one of one answer."""

    release = GaussianRelease(l2_sensitivity=2.0, noise_std=10.0)

    def aggregate(self, ctx, answers):
        mean, event = mechanisms.noisy_mean(answers, 2.0, 10.0, ctx.rng)
        assert event.answers == len(answers)  # the mechanism's own event would have covered them
        return mean.argmax(dim=1)


@pytest.mark.parametrize("adapter", [LaplaceMeanOnce, NoisyMeanUndercounted], ids=lambda cls: cls.__name__)
def test_an_aggregate_recorded_as_one_answer_is_refused(results_dir, monkeypatch, adapter):
    monkeypatch.setitem(METHODS._entries, "lp1st", adapter)
    with pytest.raises(ConfigError, match="the teacher answered 1437 inputs, but the releases under replace_record "
                                          "cover 1:") as refused:
        run_experiment(cfg_for(results_dir), show_progress=False)
    assert "\n" not in str(refused.value)


def test_an_aggregate_recorded_with_its_answers_covers_them():
    accesses = Accesses(teacher_answers=256)
    assert reconcile("m", accesses, [GaussianRelease(2.0, 10.0, count=1, answers=256)], None, False) == []
    assert reconcile("m", accesses, [LaplaceRelease(2.0, 1.0, count=2, answers=128)], None, False) == []
    assert reconcile("m", accesses, [GaussianRelease(2.0, 10.0, count=1, answers=255)], None, False)
    with pytest.raises(ConfigError, match="answers must be a positive integer"):
        GaussianRelease(2.0, 10.0, answers=0)
