"""``dfpate``: data-free PATE. A teacher ensemble on disjoint partitions of the private split labels images made by code
(a transfer set, :mod:`dpsd.distill.transfer_sets`) through a data-independent Gaussian or Laplace aggregate, and the
student learns from those answers alone. Beyond the papers: the harness's answer to what a data-free private
distillation can do with an epsilon a standard accountant signs.

After the runner's teachers are trained, ``fit`` reads no private record: its queries are rendered, not drawn from
the private split, so the boundary's image and label reads stay 0 (the run's ``boundary`` record). What it
releases about the private data is the ensemble's noisy aggregate, one per query, under ``teacher_partition`` (one
changed record changes one member, i.e. one vote):

* ``method.votes=soft``: the sum over members of their softmax outputs; one member moves it by at most sqrt(2) in
  L2 (two probability vectors differ by at most sqrt(2)) and 2 in L1;
* ``method.votes=hard``: the vote counts n_j(x) (Papernot et al. 2018, §4.1): the same bounds.

``method.aggregator`` adds N(0, sigma^2) to each count (GNMax, 2018 §4.1) or Laplace(1/gamma) (LNMax, 2017 §2.1);
the whole noisy vector is released (its argmax is post-processing, so ``method.target=soft`` costs what ``hard``
costs). With ``method.confident_threshold`` T, Confident-GNMax (2018, Alg. 1) answers only queries whose top vote
+ N(0, sigma1^2) reaches T, charged data-independently: the check for every query, the answer for every one
answered. Members are trained and queried as one batched model (:func:`dpsd.ensembles.ensemble_votes`); with
``method.member_augment=affine`` each member's training batches are randomly turned, zoomed and shifted, each member
by its own stream (:func:`dpsd.ensembles.with_member_steps`: a member's own training, no query, no release). With
``method.data_dependent`` (GNMax on vote counts), the run also reports Papernot et al.'s data-dependent RDP epsilon of
its answers as the metric ``eps_data_dependent``: the epsilon DIET-PATE states, a function of the private votes and
not a standard guarantee; neither ledger uses it.

With ``method.rounds`` R > 1 the queries are asked in R rounds: the first on fresh transfer images, each later one on
the images of a fresh pool (``method.pool`` times its query count) that the student trained on the answers so far
holds most typical of each class in turn (:func:`class_balanced_picks`: post-processing of released answers, so the
ledger is the same; the total of queries is ``method.queries`` whatever R). With ``method.dream_steps`` > 0 each pick
is then moved toward its class under that student (:func:`dreamed`: the student inverted, post-processing too), so
the members answer images the released answers shaped rather than drawn ones.

The student (``model.student``) is trained on the answered transfer images against the noisy answers: their argmax
(``target=hard``) or the noisy vector clipped at 0 and normalised (``target=soft``), with cross-entropy, or the noisy
vector over the member count as it is, with the squared loss (``target=regress``: unbiased, so the noise averages out
across queries rather than being clipped into the targets); with
``method.pretrain=rotation`` it first learns to tell how fresh transfer images were turned (self-supervised, free of
privacy cost: no teacher answers, no private record); with ``method.augment=affine`` every batch is randomly turned,
zoomed and shifted, each image keeping its answer's target (post-processing: no query more); with
``method.students`` K > 1, K students learn the answers and one more learns their mean output on fresh transfer images
(:meth:`DFPATE.train_student`: post-processing too). ``method.student_eval=train`` scores the student as DIET-PATE
does, its BatchNorm layers reading each test batch's own statistics (:class:`TestBatchStatistics`): a flagged option,
never the default, its note in the run's ledger. Every
setting of ``conf/method/dfpate.yaml`` was fixed before any MNIST run, from runs on scikit-learn's digits, a public
dataset (docs/frontier.md says which); no private record and no test image chose one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Optional

import torch
import torch.nn.functional as F
from omegaconf import MISSING, DictConfig
from torch import Tensor
from torch.utils.data import DataLoader, TensorDataset

from baselines.pate import Aggregator, aggregator_noise, confident, confident_mask, data_independent_claim, noisy_votes, releases
from dpsd.data import DataInfo, images_of, split_labels
from dpsd.augment import random_affine
from dpsd.distill.builders import make_optimizer
from dpsd.distill.transfer_sets import TRANSFER_SETS, even_shares, transfer_images
from dpsd.ensembles import ensemble_votes, load_or_train_members, with_member_steps
from dpsd.errors import ConfigError
from dpsd.methods.base import Method, MethodConfig, RunContext, RunResult, register_method
from dpsd.models import build_classifier, penultimate_features, xavier_init_
from dpsd.privacy import pate_analysis
from dpsd.privacy.boundary import CountedTeacher
from dpsd.privacy.accounting import Ledger
from dpsd.teachers import disjoint_partition

Votes = Enum("Votes", "soft hard")
Target = Enum("Target", "soft hard regress")
Pretrain = Enum("Pretrain", "none rotation")
Evaluation = Enum("Evaluation", "eval train")
Augment = Enum("Augment", "none affine")


@dataclass
class DFPATEConfig(MethodConfig):
    """``conf/method/dfpate.yaml`` (its comments say what each setting is)."""

    num_teachers: int = MISSING
    member_steps: Optional[int] = MISSING
    member_augment: Augment = MISSING
    transfer: str = MISSING
    queries: int = MISSING
    votes: Votes = MISSING
    aggregator: Aggregator = MISSING
    sigma: float = MISSING
    gamma: float = MISSING
    confident_threshold: Optional[float] = MISSING
    sigma1: float = MISSING
    target: Target = MISSING
    data_dependent: bool = MISSING
    pretrain: Pretrain = MISSING
    pretrain_images: int = MISSING
    pretrain_epochs: int = MISSING
    student_eval: Evaluation = MISSING
    rounds: int = MISSING
    pool: int = MISSING
    dream_steps: int = MISSING
    dream_lr: float = MISSING
    dream_tv: float = MISSING
    augment: Augment = MISSING
    students: int = MISSING
    distill_images: int = MISSING
    epochs: int = MISSING
    batch_size: int = MISSING
    lr: float = MISSING


def student_targets(noisy: Tensor, target: str, members: int) -> Tensor:
    """What the student learns from each noisy answer, ``len(noisy) x classes``. ``hard``: one-hot at the argmax;
    ``soft``: the answer clipped at 0 and normalised (uniform where nothing is left); ``regress``: the answer over the
    member count as it is, negative totals kept: an unbiased estimate of the members' mean vote (the noise has mean
    0), which :func:`brier_loss` regresses on, so that the noise averages out across queries rather than being clipped
    into the targets."""
    if target == "regress":
        return noisy / members
    if target == "hard":
        return F.one_hot(noisy.argmax(dim=1), noisy.shape[1]).float()
    kept = noisy.clamp(min=0)
    total = kept.sum(dim=1, keepdim=True)
    return torch.where(total > 0, kept / total.clamp(min=1e-12), torch.full_like(kept, 1 / noisy.shape[1]))


@register_method("dfpate")
class DFPATE(Method):
    """A teacher ensemble labels a programmatic transfer set through a data-independent noisy aggregate."""

    config = DFPATEConfig

    @staticmethod
    def check_config(cfg: DictConfig) -> None:
        TRANSFER_SETS.get(str(cfg.method.transfer))  # an unknown set: one line naming the known ones
        confident(cfg)
        rounds, pool, queries = int(cfg.method.rounds), int(cfg.method.pool), int(cfg.method.queries)
        if int(cfg.method.students) < 1 or int(cfg.method.distill_images) < 1:
            raise ConfigError(f"method.students={cfg.method.students} method.distill_images="
                              f"{cfg.method.distill_images}: both must be at least 1")
        if int(cfg.method.dream_steps) < 0 or float(cfg.method.dream_lr) <= 0 or float(cfg.method.dream_tv) < 0:
            raise ConfigError(f"method.dream_steps={cfg.method.dream_steps} method.dream_lr={cfg.method.dream_lr} "
                              f"method.dream_tv={cfg.method.dream_tv}: steps and the total-variation weight must be "
                              "at least 0, the rate above 0")
        if not 1 <= rounds <= queries or pool < 1:
            raise ConfigError(f"method.rounds={rounds} method.pool={pool}: rounds must be 1 to method.queries "
                              f"({queries}) and pool at least 1")
        if cfg.method.data_dependent and (cfg.method.aggregator != "gnmax" or cfg.method.votes != "hard"):
            raise ConfigError("method.data_dependent needs GNMax on vote counts (method.aggregator=gnmax "
                              f"method.votes=hard), got {cfg.method.aggregator} on {cfg.method.votes} votes")

    @staticmethod
    def noise_parameter(cfg: DictConfig) -> tuple[str, float, float]:
        return aggregator_noise(cfg, sigma_max=1e7)  # a thousand teachers' summed votes need more than PATE's 1e6

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = Ledger(claim=data_independent_claim(cfg), notes=[
            "data-free after the teachers: the queries are a programmatic transfer set "
            f"({cfg.method.transfer}); privacy w.r.t. the teachers' disjoint partitions of the whole private split",
            f"released: the noisy {cfg.method.votes} vote vector of every answered query (the student's targets are "
            "post-processing of it)",
            *([f"metric eps_data_dependent (DIET-PATE's epsilon): {pate_analysis.NOT_PUBLISHABLE}"]
              if cfg.method.data_dependent else []),
            *([TRAIN_MODE_NOTE] if cfg.method.student_eval == "train" else [])])
        for release in releases(cfg):
            ledger.record(release)
        return ledger

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return 0  # the student's batches depend on the queries answered

    def fit(self, ctx: RunContext) -> RunResult:
        cfg, data, device, method = ctx.cfg, ctx.data, ctx.device, ctx.cfg.method
        teachers = int(method.num_teachers)
        if not 1 <= teachers <= len(data.train):
            raise ConfigError(f"method.num_teachers={teachers}: the private split of {len(data.train)} records "
                              f"allows 1 to {len(data.train)} disjoint partitions")
        parts, _ = disjoint_partition(len(data.train), teachers, 0, int(cfg.seed))
        names = [f"{i}/{teachers}" for i in range(teachers)]
        members = load_or_train_members(with_member_steps(cfg, method.member_steps, str(method.member_augment)),
                                        data, device, parts, names, ctx.phase_log)
        rng = torch.Generator().manual_seed(int(cfg.seed))
        chunk = int(cfg.model.teacher.ensemble.chunk)
        asked, answers, clean, student, loss = [], [], [], None, float("nan")
        for turn, count in enumerate(even_shares(int(method.queries), int(method.rounds))):
            images = transfer_images(str(method.transfer), count * (1 if turn == 0 else int(method.pool)),
                                     data.channels, data.image_size, data.space, rng)
            if turn:
                images = images[class_balanced_picks(student, images, count, ctx.info.num_classes, device)]
                if int(method.dream_steps):
                    images = dreamed(student, images, picked_classes(count, ctx.info.num_classes), ctx)
            soft, hard = ensemble_votes(members, images, device, chunk=chunk,
                                        log=ctx.phase_log("member votes", math.ceil(teachers / chunk)))
            votes = soft if method.votes == "soft" else hard
            answered = torch.ones(len(votes), dtype=torch.bool, device=votes.device)
            if confident(cfg):
                answered, event = confident_mask(votes, cfg, ctx.rng)
                ctx.ledger.record(event)
            if not answered.any():
                raise ConfigError(f"dfpate: the confident threshold answered no query of round {turn + 1}; lower "
                                  "method.confident_threshold")
            noisy, event = noisy_votes(votes[answered], cfg, ctx.rng)
            ctx.ledger.record(event)
            asked.append(images[answered.cpu()])
            answers.append(noisy)
            clean.append(votes[answered])
            student, loss = self.train_student(ctx, torch.cat(asked), student_targets(
                torch.cat(answers), str(method.target), teachers).cpu())
        noisy, votes = torch.cat(answers), torch.cat(clean)
        if method.student_eval == "train":
            student = TestBatchStatistics(student)
        metrics = {"final_student_loss": loss, "answered_queries": float(len(votes)),
                   "aggregate_agreement": float((noisy.argmax(dim=1) == votes.argmax(dim=1)).float().mean()),
                   "vote_margin": float(_top_two_gap(votes).mean() / teachers),
                   "num_teachers": float(teachers),
                   "ensemble_test_accuracy": ensemble_test_accuracy(members, ctx, chunk)}
        if method.data_dependent:  # DIET-PATE's epsilon: a function of the private votes, never published as a ledger
            metrics["eps_data_dependent"] = pate_analysis.gnmax_data_dependent_epsilon(
                votes.cpu().numpy(), float(method.sigma), float(cfg.privacy.delta))
        images = torch.cat(asked)
        return RunResult(student=student, ledger=ctx.ledger, samples=images[:64], metrics=metrics)

    @staticmethod
    def train_student(ctx: RunContext, images: Tensor, targets: Tensor) -> tuple[torch.nn.Module, float]:
        """The student of the answers so far. With ``method.students`` K = 1, :func:`one_student` on them. With K > 1,
        K students learn the same answers, each from its own initialisation, and the student released is one more
        that learns the answered queries together with ``method.distill_images`` fresh transfer images labelled by the K
        students' mean softmax output: post-processing of the released answers (no query more, no private record), the
        variance of K fits to noisy answers averaged away into one ``model.student``."""
        method = ctx.cfg.method
        students = [one_student(ctx, images, targets) for _ in range(int(method.students))]
        if len(students) == 1:
            return students[0]
        rng = torch.Generator().manual_seed(int(ctx.cfg.seed) + 3)  # apart from the other streams
        fresh = transfer_images(str(method.transfer), int(method.distill_images), ctx.data.channels,
                                ctx.data.image_size, ctx.data.space, rng)
        mean = mean_softmax([net for net, _ in students], fresh, ctx.device)
        return one_student(ctx, torch.cat([images, fresh]), torch.cat([targets, mean]))


def one_student(ctx: RunContext, images: Tensor, targets: Tensor) -> tuple[torch.nn.Module, float]:
    """A Xavier-initialised ``model.student``, pretrained on generated images where ``method.pretrain`` says so
    (:func:`pretrain_rotation`), then trained with Adam (``method.lr``) for ``method.epochs`` passes of
    ``method.batch_size`` over ``images`` against the target distributions (cross-entropy), each batch moved by
    :func:`dpsd.augment.random_affine` where ``method.augment=affine`` (an image keeps its answer's
    target: post-processing, no query more)."""
    cfg, info, method = ctx.cfg, ctx.info, ctx.cfg.method
    student = xavier_init_(build_classifier(cfg.model.student.arch, info.channels, info.image_size,
                                            info.num_classes)).to(ctx.device)
    if method.pretrain == "rotation":
        pretrain_rotation(ctx, student)
    optimizer = make_optimizer("adam", student.parameters(), float(method.lr))
    moves = torch.Generator().manual_seed(int(cfg.seed) + 2)  # apart from the queries' and pretraining's streams
    augment = (lambda x: random_affine(x, moves)) if method.augment == "affine" else (lambda x: x)
    loss = _train(student, optimizer, images, targets, ctx, lambda net, x: net(augment(x)),
                  criterion=brier_loss if method.target == "regress" else soft_cross_entropy)
    return student.eval(), loss


def ensemble_test_accuracy(members: list[torch.nn.Module], ctx: RunContext, chunk: int) -> float:
    """The members' clean aggregate scored on the test split: the argmax of their summed ``method.votes`` (no noise),
    against the test labels. What the student could learn at most from answers without noise; scoring, not a release
    (the members' networks answer outside the boundary's count, as the runner scores a teacher)."""
    test = ctx.data.test
    images, labels = images_of(test, range(len(test))), torch.tensor(split_labels(test))
    networks = [member.teacher if isinstance(member, CountedTeacher) else member for member in members]
    soft, hard = ensemble_votes(networks, images, ctx.device, chunk=chunk)
    votes = soft if ctx.cfg.method.votes == "soft" else hard
    return float((votes.argmax(dim=1).cpu() == labels).float().mean())


def mean_softmax(networks: list[torch.nn.Module], images: Tensor, device: torch.device) -> Tensor:
    """The mean over ``networks`` (in eval mode) of their softmax outputs on ``images``, in chunks of 1,024, on the
    CPU: ``len(images) x classes``. Post-processing of students trained on released answers."""
    with torch.no_grad():
        return torch.cat([torch.stack([net.eval()(x.to(device)).softmax(dim=1) for net in networks]).mean(dim=0).cpu()
                          for x in images.split(1024)])


def class_balanced_picks(student: torch.nn.Module, pool: Tensor, count: int, classes: int,
                         device: torch.device) -> Tensor:
    """``count`` indices into ``pool`` that the student (trained on the answers so far: post-processing, no private
    record) holds most typical of each class in turn: class ``c`` takes the images with the highest student
    probability of ``c`` not taken yet, ``count / classes`` of them (the first classes one more where ``classes``
    does not divide ``count``). The next round's queries then cover every class the student knows, however the
    transfer set leans, each where the student is surest and the teachers' answer confirms or corrects it."""
    probability = mean_softmax([student], pool, device)
    free = torch.ones(len(pool), dtype=torch.bool)
    picks = []
    for c, share in enumerate(even_shares(count, classes)):
        best = torch.where(free, probability[:, c], torch.tensor(-1.0)).topk(share).indices
        free[best] = False
        picks.append(best)
    return torch.cat(picks)


def picked_classes(count: int, classes: int) -> Tensor:
    """The class each of :func:`class_balanced_picks`' ``count`` picks was picked for, in its order."""
    return torch.arange(classes).repeat_interleave(torch.tensor(even_shares(count, classes)))


def total_variation(images: Tensor) -> Tensor:
    """The mean absolute difference between neighbouring pixels, across and down, of each image: ``len(images)``."""
    across = (images[..., :, 1:] - images[..., :, :-1]).abs().flatten(1).mean(dim=1)
    down = (images[..., 1:, :] - images[..., :-1, :]).abs().flatten(1).mean(dim=1)
    return across + down


def dreamed(student: torch.nn.Module, images: Tensor, classes: Tensor, ctx: RunContext) -> Tensor:
    """``images`` moved toward ``classes`` under the student trained on the answers so far: ``method.dream_steps``
    Adam steps (``method.dream_lr``) on the pixels minimising the student's cross-entropy for each image's class plus
    ``method.dream_tv`` times its :func:`total_variation`, each step kept within the pixel range of the data space
    ([0, 1] mapped as :func:`dpsd.distill.transfer_sets.transfer_images` maps it). The student's weights stay as they
    are. Model inversion of the student, as DeepInversion inverts a teacher (Yin et al. 2020, eq. 2-3, its feature
    statistics term left out: the student saw no private image), but of a network trained on released answers only:
    post-processing, no query more, no private record. The members then answer the images it makes."""
    method, channels = ctx.cfg.method, images.shape[1]
    space = ctx.data.space.for_channels(channels)
    mean, std = torch.tensor(space.mean).view(1, channels, 1, 1), torch.tensor(space.std).view(1, channels, 1, 1)
    low, high = ((0 - mean) / std).to(ctx.device), ((1 - mean) / std).to(ctx.device)
    pixels = images.clone().to(ctx.device).requires_grad_(True)
    optimizer = torch.optim.Adam([pixels], lr=float(method.dream_lr))
    student.eval().requires_grad_(False)
    targets = classes.to(ctx.device)
    for _ in range(int(method.dream_steps)):
        loss = (F.cross_entropy(student(pixels), targets, reduction="none")
                + float(method.dream_tv) * total_variation(pixels)).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            pixels.copy_(torch.maximum(torch.minimum(pixels, high), low))
    student.requires_grad_(True)
    return pixels.detach().cpu()


def pretrain_rotation(ctx: RunContext, student: torch.nn.Module) -> float:
    """Self-supervised pretraining on ``method.pretrain_images`` fresh images of the transfer set (no teacher, no private
    record: no privacy cost): each image turned by 0, 90, 180 or 270 degrees, a linear head on the student's
    penultimate features learns which (rotation prediction, Gidaris et al. 2018) for ``method.pretrain_epochs`` passes
    with Adam (``method.lr``); the head is then dropped. Returns the last loss."""
    cfg, data, method = ctx.cfg, ctx.data, ctx.cfg.method
    rng = torch.Generator().manual_seed(int(cfg.seed) + 1)  # apart from the queries' stream
    images = transfer_images(str(method.transfer), int(method.pretrain_images), data.channels, data.image_size,
                             data.space, rng)
    turns = torch.randint(0, 4, (len(images),), generator=rng)
    turned = torch.stack([torch.rot90(image, int(k), dims=(1, 2)) for image, k in zip(images, turns)])
    with torch.no_grad():
        width = penultimate_features(student, turned[:2].to(ctx.device))[0].shape[1]
    head = torch.nn.Linear(width, 4).to(ctx.device)
    optimizer = make_optimizer("adam", [*student.parameters(), *head.parameters()], float(method.lr))
    return _train(student, optimizer, turned, F.one_hot(turns, 4).float(), ctx,
                  lambda net, x: head(penultimate_features(net, x)[0]), epochs=int(method.pretrain_epochs))


def soft_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """The batch's mean cross-entropy of ``logits`` against target distributions."""
    return -(targets * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


def brier_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """The batch's mean squared distance between the softmax of ``logits`` and the targets (Brier 1950). With
    ``method.target=regress`` a target is the members' mean vote plus zero-mean noise, so over the noise this loss's
    expectation is the distance to the clean mean vote plus a constant (the noise's variance): its minimiser is that
    of the answers without noise, however low a single answer's signal to noise. Bounded below, unlike a
    cross-entropy against targets with negative entries, which a student could drive to minus infinity."""
    return (logits.softmax(dim=1) - targets).square().sum(dim=1).mean()


def _train(student: torch.nn.Module, optimizer: torch.optim.Optimizer, images: Tensor, targets: Tensor,
           ctx: RunContext, logits, epochs: int | None = None, criterion=soft_cross_entropy) -> float:
    """``epochs`` (default ``method.epochs``) shuffled passes of ``method.batch_size`` minimising ``criterion`` of
    ``logits(student, x)`` against the targets; returns the last batch's loss."""
    cfg = ctx.cfg
    loader = DataLoader(TensorDataset(images, targets), batch_size=int(cfg.method.batch_size), shuffle=True,
                        generator=torch.Generator().manual_seed(int(cfg.seed)))
    student.train()
    loss, step = torch.zeros(()), 0
    for _ in range(int(cfg.method.epochs) if epochs is None else epochs):
        for x, y in loader:
            loss = criterion(logits(student, x.to(ctx.device)), y.to(ctx.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            ctx.progress(step, {"loss": loss.detach()})
            step += 1
    return float(loss.detach())


TRAIN_MODE_NOTE = ("method.student_eval=train (DIET-PATE's evaluation): the student's BatchNorm layers normalise each "
                   "test batch with its own statistics, so the test split's statistics leak into the accuracy; not the "
                   "released model's score")


class TestBatchStatistics(torch.nn.Module):
    """The student as DIET-PATE scores it: its BatchNorm layers normalise with each batch's own statistics even in eval
    mode (their running statistics frozen: momentum 0), so a test batch's statistics leak into its score."""

    def __init__(self, student: torch.nn.Module) -> None:
        super().__init__()
        self.student = student
        for layer in self._batch_norms():
            layer.momentum = 0.0

    def _batch_norms(self) -> list[torch.nn.Module]:
        return [m for m in self.student.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]

    def train(self, mode: bool = True) -> "TestBatchStatistics":
        super().train(mode)
        for layer in self._batch_norms():
            layer.train(True)
        return self

    def forward(self, x: Tensor) -> Tensor:
        return self.student(x)


def _top_two_gap(votes: Tensor) -> Tensor:
    """The gap between each query's two largest (clean) vote totals: how far from the noise the answer stands."""
    top = votes.topk(2, dim=1).values
    return top[:, 0] - top[:, 1]
