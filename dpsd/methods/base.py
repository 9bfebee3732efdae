"""The method interface every core method and baseline adapter implements.

A method is a class registered by name with ``@register_method("name")``. It reads its settings
from ``ctx.cfg``, trains, and returns a :class:`RunResult`; it never writes files or talks to MLflow
(the runner records what it returns). ``plan_ledger`` states, without training, which private
releases a run with this config will make, so ``dpsd privacy-report`` can account for a run before
it happens; ``fit`` records the releases as it makes them into ``ctx.ledger``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Optional

import torch
from omegaconf import MISSING, DictConfig
from torch import nn

from dpsd.checkpoint import Checkpointer
from dpsd.data import DataInfo, DataSplits
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import totals
from dpsd.progress import ProgressLog
from dpsd.registry import Registry

METHODS: Registry[type["Method"]] = Registry("method")
register_method = METHODS.register


@dataclass
class MethodConfig:
    """The types of a method's config node (``conf/method/<name>.yaml`` holds the values).

    A method's own dataclass extends this one with a field per setting, its type the only thing it
    states (``= MISSING``: the value comes from the YAML). A switch is an :class:`~enum.Enum` of the
    accepted values (``Outputs = Enum("Outputs", "logits probabilities")``), so a value outside it
    stops :func:`dpsd.config.compose` with one line naming the accepted ones; adding a switch is one
    field here and one line in the YAML (``tests/test_method_configs.py`` checks the two agree).
    """

    name: str = MISSING


Optimizer = Enum("Optimizer", "adam sgd")


@dataclass
class RunContext:
    """Everything a method's ``fit`` needs, prepared by the runner."""

    cfg: DictConfig
    data: DataSplits
    teachers: list[nn.Module]  # the full-data teacher; ensembles build members via dpsd.teachers
    device: torch.device
    rng: torch.Generator
    ledger: Ledger
    progress: Callable[[int, dict[str, float]], None] = lambda step, metrics: None
    # a log for a phase before or beside the steps (ensemble members, a generator, a VAE): ``(desc, total)``
    # gives a ProgressLog where the run prints progress lines (stdout not a terminal), else None
    phase_log: Callable[[str, int], Optional[ProgressLog]] = lambda desc, total: None
    # ``checkpoint.every_steps`` > 0 on a resumable method: saves the trainer's state, resumes a killed run
    checkpoint: Optional[Checkpointer] = None

    @property
    def info(self) -> DataInfo:
        """What the method may know of the data: its classes, channels, side and the input space its images are in
        (a generator's tanh output is mapped into it, :class:`dpsd.models.generators.Generator`)."""
        return DataInfo(self.data.num_classes, self.data.channels, self.data.image_size, self.data.space)


@dataclass
class RunResult:
    """What a method hands back: the releasable models, its own metrics and the filled ledger."""

    student: nn.Module
    ledger: Ledger
    generator: Optional[nn.Module] = None
    samples: Optional[torch.Tensor] = None  # a few synthetic images for the sample grid
    metrics: dict[str, float] = field(default_factory=dict)


class Trainer:
    """One iterative method's state; ``step()`` runs one iteration of its algorithm and returns its
    metrics as detached 0-d tensors (no host synchronisation per step on a GPU: they are read when a
    progress line or the recorded run needs them).

    ``student`` and ``generator`` (``None`` for a method without one) are what the run releases;
    ``queries`` counts the teacher queries made so far (samples annotated for the student);
    ``sample_grid()`` a few synthetic images (``None`` without a generator); ``close()`` lets go of
    what the trainer holds beyond the run (FedDPSD's Ray clients). ``checkpointed`` names the attributes
    (networks, optimizers: anything with ``state_dict``) that, with ``queries``, the run's random generators and
    the ledger, are all the next step depends on (:mod:`dpsd.checkpoint`); a method whose trainer names them
    says so in :meth:`Method.resumable`.
    """

    student: nn.Module
    generator: Optional[nn.Module] = None
    queries: int = 0
    checkpointed: tuple[str, ...] = ()

    def step(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def sample_grid(self) -> Optional[torch.Tensor]:
        return None

    def close(self) -> None:
        """Nothing to let go of by default."""


NOISE_PARAMETERS: dict[str, tuple[str, float, float]] = {
    "label": ("privacy.query_epsilon", 1e-6, 1e3),
    "data": ("privacy.sigma", 1e-3, 1e9),
}
"""Privacy mode -> the config key ``privacy.calibrate`` solves for by default, and the smallest and
largest value searched: the randomized response's per-query epsilon (label mode), the Gaussian noise
scale with ``beta`` kept (data mode)."""


class Method:
    """Base class: subclasses implement ``plan_ledger`` and either ``make_trainer`` or ``fit``.

    Iterative methods implement ``make_trainer(ctx)``: the :class:`Trainer` whose ``step()`` is one
    iteration of their algorithm. The default ``fit`` runs ``total_steps(cfg)`` of them (the one
    iteration loop) and ``python -m dpsd.bench`` times the same step against ``privacy=none``.
    ``check_config`` rejects, before any data is read, settings the method cannot honour;
    ``noise_parameter`` names what ``privacy.calibrate`` solves for; ``config`` is the dataclass
    (a :class:`MethodConfig`) that types the method's config node.

    ``noise_off`` maps each config key that sets the noise of the method's mechanisms to its
    no-noise value (``privacy.noiseless=true``, :func:`dpsd.config.switch_noise_off`); empty: the
    method has no noiseless rung.

    ``annotator_class`` is the class whose instances answer the method's teacher queries, built as
    ``annotator_class(cfg, num_classes, rng, ledger)`` and called as its trainer calls it;
    ``dpsd audit mechanism`` drives it (``None``: the method has no annotator, e.g. PATE, DP-SGD).
    """

    noise_off: dict[str, float] = {}
    annotator_class: type | None = None
    config: type[MethodConfig] = MethodConfig

    @staticmethod
    def check_config(cfg: DictConfig) -> None:
        """One-line ConfigErrors for settings this method cannot honour (run by ``dpsd.experiment.resolve_run``)."""

    @staticmethod
    def resumable(cfg: DictConfig) -> bool:
        """Whether a run of ``cfg`` can resume from a checkpoint (``checkpoint.every_steps``): only where the
        default :meth:`fit` drives a trainer whose ``checkpointed`` attributes hold all its state."""
        return False

    @staticmethod
    def noise_parameter(cfg: DictConfig) -> tuple[str, float, float]:
        """The config key path ``privacy.calibrate`` solves for and its search range: by default
        the privacy mode's (:data:`NOISE_PARAMETERS`)."""
        return NOISE_PARAMETERS[cfg.privacy.mode]

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        raise NotImplementedError

    def make_trainer(self, ctx: RunContext) -> Trainer:
        raise NotImplementedError(f"{type(self).__name__} has no per-iteration trainer")

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        """Steps a run takes (the progress bar's length): ``method.iterations`` T times
        ``method.steps_per_iteration`` s (an iteration read as s steps; 1 where a method has no s)."""
        return int(cfg.method.iterations) * int(cfg.method.get("steps_per_iteration", 1))

    def fit(self, ctx: RunContext) -> RunResult:
        """``total_steps(cfg)`` steps of the method's trainer, then :meth:`result`; with ``ctx.checkpoint``,
        from the step a checkpoint of this run had reached, saving one every ``checkpoint.every_steps`` (with the
        ledger's totals, :func:`~dpsd.privacy.events.totals`, not one release a step)."""
        trainer, total, checkpoint = self.make_trainer(ctx), self.total_steps(ctx.cfg), ctx.checkpoint
        try:
            clock = time.perf_counter()
            start, before = checkpoint.restore(trainer, ctx.ledger.events, ctx.rng) if checkpoint else (0, 0.0)
            metrics: dict[str, float] = {}
            for step in range(start, total):
                metrics = trainer.step()
                ctx.progress(step, metrics)
                if checkpoint and checkpoint.due(step + 1, total):
                    checkpoint.save(step + 1, trainer, totals(ctx.ledger.events), ctx.rng,
                                    before + time.perf_counter() - clock)
            result = self.result(ctx, trainer, metrics)
            if checkpoint:  # the driver adds the seconds trained before the resume to time_train_s
                result.metrics.update(resumed_after_step=float(start), train_s_before_resume=before)
            return result
        finally:
            trainer.close()

    def result(self, ctx: RunContext, trainer: Trainer, metrics: dict[str, float]) -> RunResult:
        """What a finished trainer releases; ``metrics`` are the last step's, logged as ``final_<name>``,
        with the teacher queries the run made."""
        return RunResult(
            student=trainer.student, generator=trainer.generator, ledger=ctx.ledger, samples=trainer.sample_grid(),
            metrics={**{f"final_{name}": value for name, value in metrics.items()}, "queries": float(trainer.queries)},
        )
