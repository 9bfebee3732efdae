"""End-to-end one-run audit: Steinke, Nasr & Jagielski, NeurIPS 2023, "Privacy
Auditing with One (1) Training Run" (arXiv:2305.08846).

``dpsd audit run [overrides] --canaries m``:

1. m canaries: m records drawn (seeded) from the private split, each given a wrong label (drawn
   uniformly among the other classes); each is included in the private training set with
   probability 1/2, independently; the excluded ones are left out (an add/remove neighbour per
   canary). The rest of the private split is kept as it is.
2. The whole pipeline runs on that set: the teacher(s) trained from scratch (in a teacher cache of
   the audit's own, ``<results_dir>/canary-audit/<m>-<seed>/``, so no teacher of the real split is
   reused), then the method's ``fit``.
3. Each canary is scored on what the run *releases*: the student's loss on the canary with its
   wrong label (``-CE``: a memorised canary scores high) and, where a generator is released, the
   distance from the canary image to its nearest generated sample (``-min ||x - g(z)||``).
4. The scores become an epsilon lower bound at ``delta``: guess "included" for the k highest
   scores; with v correct guesses out of k, :func:`one_run_p_value` is Theorem 5.2 of the paper
   with the delta term of its Proposition 5.7 (the same as DeepMind jax_privacy's
   ``CanaryScoreAuditor.epsilon_one_run``, ``_one_run_p_value``), and the bound is the largest
   epsilon whose p-value is below the significance. k ranges over :data:`GUESS_FRACTIONS` of m and
   the significance is split over them (Bonferroni), and over the two scores when a generator is
   released, so the reported bound holds at the stated confidence.

jax_privacy itself is not a dependency (it pulls in jax, jaxlib, optax and chex); the tests
cross-check this implementation against the paper's closed forms and, when jax_privacy is
installed, against its auditor.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from scipy.optimize import brentq
from scipy.stats import binom
from torch.utils.data import ConcatDataset, DataLoader, Dataset, Subset, TensorDataset

from dpsd.errors import ConfigError

GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.5)
"""The numbers of guesses tried, as fractions of the canaries (the paper's k_+; k_- = 0)."""


def one_run_p_value(canaries: int, guesses: int, correct: int, epsilon: float, delta: float) -> float:
    """Steinke, Nasr & Jagielski 2023, Theorem 5.2 (delta = 0): the probability that ``guesses``
    guesses about an (epsilon, 0)-DP run's canaries are right ``correct`` times or more is at most
    P[Binomial(guesses, e^eps / (1 + e^eps)) >= correct]; with delta > 0 (Prop. 5.7) the
    bound grows by 2 m delta max_i (P[Bin >= correct - i] - P[Bin >= correct]) / i."""
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(binom.sf(correct - 1, guesses, q))
    if delta == 0:
        return tail
    shifts = np.arange(1, correct + 1)
    alpha = float(np.max((binom.sf(correct - shifts - 1, guesses, q) - tail) / shifts, initial=0.0))
    return min(tail + alpha * delta * 2 * canaries, 1.0)


def one_run_epsilon(canaries: int, guesses: int, correct: int, delta: float, significance: float) -> float:
    """The largest epsilon the observation refutes at ``significance`` (0 if it refutes none)."""
    if guesses == 0 or one_run_p_value(canaries, guesses, correct, 0.0, delta) > significance:
        return 0.0
    high = 1.0
    while one_run_p_value(canaries, guesses, correct, high, delta) <= significance:
        high *= 2
        if high > 1e3:
            return math.inf
    return float(brentq(lambda eps: significance - one_run_p_value(canaries, guesses, correct, eps, delta),
                        0.0, high, xtol=1e-6))


def epsilon_from_scores(scores: np.ndarray, included: np.ndarray, delta: float, significance: float) -> dict[str, Any]:
    """The bound from canary scores (higher: more likely included): the top-k guesses for each k of
    :data:`GUESS_FRACTIONS`, significance split evenly over them; the best k is reported."""
    canaries = len(scores)
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    counts = sorted({max(1, int(round(fraction * canaries))) for fraction in GUESS_FRACTIONS})
    best = {"eps_lower_bound": 0.0, "guesses": 0, "correct": 0}
    for guesses in counts:
        correct = int(np.asarray(included)[order[:guesses]].sum())
        epsilon = one_run_epsilon(canaries, guesses, correct, delta, significance / len(counts))
        if epsilon > best["eps_lower_bound"] or best["guesses"] == 0:
            best = {"eps_lower_bound": epsilon, "guesses": guesses, "correct": correct}
    return best


@dataclasses.dataclass(frozen=True)
class Canaries:
    """The audit's draw: which private records are canaries, their wrong labels, which are in."""

    indices: torch.Tensor
    labels: torch.Tensor
    included: torch.Tensor


def draw_canaries(train: Dataset, num_classes: int, count: int, seed: int) -> Canaries:
    """``count`` private records, a wrong label each, each included with probability 1/2 (seeded)."""
    if not 1 <= count <= len(train) // 2:
        raise ConfigError(f"audit run: --canaries must lie in [1, {len(train) // 2}] (half the private split), got {count}")
    rng = torch.Generator().manual_seed(seed)
    indices = torch.randperm(len(train), generator=rng)[:count]
    true = torch.as_tensor([int(train[int(i)][1]) for i in indices])
    labels = (true + torch.randint(1, num_classes, (count,), generator=rng)) % num_classes
    included = torch.rand(count, generator=rng) < 0.5
    return Canaries(indices=indices, labels=labels, included=included)


def canary_images(train: Dataset, canaries: Canaries) -> torch.Tensor:
    return torch.stack([torch.as_tensor(train[int(i)][0]) for i in canaries.indices])


def training_set(train: Dataset, canaries: Canaries) -> Dataset:
    """The private split without any canary, plus the included canaries with their wrong labels."""
    out = set(canaries.indices.tolist())
    kept = Subset(train, [i for i in range(len(train)) if i not in out])
    images = canary_images(train, canaries)[canaries.included]
    labels = canaries.labels[canaries.included].tolist()  # ints, as the private split's labels
    return ConcatDataset([kept, list(zip(images, labels))])


@torch.no_grad()
def student_scores(student: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, device: torch.device) -> np.ndarray:
    """-cross-entropy of the released student on each canary with its wrong label."""
    student.eval()
    losses = [F.cross_entropy(student(x.to(device)), y.to(device), reduction="none").cpu()
              for x, y in DataLoader(TensorDataset(images, labels), batch_size=512)]
    return -torch.cat(losses).double().numpy()


@torch.no_grad()
def generator_scores(generator: torch.nn.Module, images: torch.Tensor, samples: int, seed: int,
                     device: torch.device) -> np.ndarray:
    """-distance from each canary image to its nearest of ``samples`` generated images."""
    generator.eval()
    rng = torch.Generator(device=device).manual_seed(seed)
    z = torch.randn(samples, generator.latent_dim, generator=rng, device=device)
    synthetic = torch.cat([generator(chunk) for chunk in z.split(512)]).flatten(1)
    return -torch.cdist(images.to(device).flatten(1), synthetic).min(dim=1).values.double().cpu().numpy()


def audit_one_run(cfg: DictConfig, canaries: int, confidence: float = 0.95, synthetic: int = 2000) -> dict[str, Any]:
    """Run the method once on the private split with ``canaries`` canaries and bound its epsilon
    from below (module docstring); the result holds the bound beside both ledgers of the run."""
    from dpsd.config import resolve_device
    from dpsd.data import DataInfo, load_dataset
    from dpsd.methods import METHODS
    from dpsd.methods.base import RunContext
    from dpsd.teachers import evaluate_accuracy, load_or_train_teacher

    if not 0 < confidence < 1:
        raise ConfigError(f"audit run: --confidence must lie in (0, 1), got {confidence}")
    seed, delta = int(cfg.seed), float(cfg.privacy.delta)
    device = resolve_device(cfg.device)
    data = load_dataset(cfg.dataset.name, root=cfg.data.root, download=cfg.data.download, **cfg.dataset.options)
    drawn = draw_canaries(data.train, data.num_classes, canaries, seed)
    audited = dataclasses.replace(data, train=training_set(data.train, drawn))
    cfg = cfg.copy()
    cfg.results_dir = str(Path(cfg.results_dir) / "canary-audit" / f"{canaries}-{seed}")  # fresh teachers
    method_cls = METHODS.get(cfg.method.name)
    plan = method_cls.plan_ledger(cfg, DataInfo(data.num_classes, data.channels, data.image_size))
    teacher, record = load_or_train_teacher(cfg, audited, device)
    torch.manual_seed(seed)
    ctx = RunContext(cfg=cfg, data=audited, teachers=[teacher], device=device,
                     rng=torch.Generator(device=device).manual_seed(seed), ledger=plan.planned())
    result = method_cls().fit(ctx)
    images, included = canary_images(data.train, drawn), drawn.included.numpy()
    scores = {"student_loss": student_scores(result.student, images, drawn.labels, device)}
    if result.generator is not None and hasattr(result.generator, "latent_dim"):
        scores["generator_distance"] = generator_scores(result.generator, images, synthetic, seed, device)
    significance = (1 - confidence) / len(scores)
    bounds = {name: epsilon_from_scores(value, included, delta, significance) for name, value in scores.items()}
    best = max(bounds, key=lambda name: bounds[name]["eps_lower_bound"])
    ledger = result.ledger.summary(delta)
    return {
        "method": cfg.method.name, "dataset": cfg.dataset.name, "canaries": canaries,
        "included": int(included.sum()), "confidence": confidence, "delta": delta,
        "audit_neighbouring": "add_remove_record (a mislabelled canary in or out)",
        "eps_lower_bound": bounds[best]["eps_lower_bound"], "score": best, "bounds": bounds,
        "eps_claimed": ledger["eps_claimed"], "eps_rigorous": ledger["eps_rigorous"],
        "neighbouring": ledger["neighbouring"], "uncovered": ledger["uncovered"],
        "student_test_accuracy": evaluate_accuracy(result.student, data.test, device),
        "teacher_test_accuracy": record["test_accuracy"],
    }
