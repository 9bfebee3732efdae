"""The method interface every core method and baseline adapter implements.

A method is a class registered by name with ``@register_method("name")``. It reads its settings
from ``ctx.cfg``, trains, and returns a :class:`RunResult`; it never writes files or talks to MLflow
(the runner records what it returns). ``plan_ledger`` states, without training, which private
releases a run with this config will make, so ``dpsd privacy-report`` can account for a run before
it happens; ``fit`` records the releases as it makes them into ``ctx.ledger``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

import torch
from omegaconf import DictConfig
from torch import nn

from dpsd.data import DataInfo, DataSplits
from dpsd.privacy.accounting import Ledger
from dpsd.registry import Registry

METHODS: Registry[type["Method"]] = Registry("method")
register_method = METHODS.register


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

    @property
    def info(self) -> DataInfo:
        return DataInfo(self.data.num_classes, self.data.channels, self.data.image_size, len(self.data.train))


@dataclass
class RunResult:
    """What a method hands back: the releasable models, its own metrics and the filled ledger."""

    student: nn.Module
    ledger: Ledger
    generator: Optional[nn.Module] = None
    samples: Optional[torch.Tensor] = None  # a few synthetic images for the sample grid
    metrics: dict[str, float] = field(default_factory=dict)


class Trainer(Protocol):
    """One iterative method's state; ``step()`` runs one iteration of its algorithm."""

    def step(self) -> dict[str, float]: ...


class Method:
    """Base class: subclasses implement ``plan_ledger`` and ``fit``.

    ``noise_off`` maps each config key that sets the noise of the method's mechanisms to its
    no-noise value (``privacy.noiseless=true``, :func:`dpsd.config.switch_noise_off`); empty: the
    method has no noiseless rung.

    Iterative methods also implement ``make_trainer(ctx)``: the object whose ``step()`` is one
    iteration of their algorithm. ``fit`` loops over it and ``python -m dpsd.bench`` times it
    against the same step with ``privacy=none``.
    """

    noise_off: dict[str, float] = {}

    def make_trainer(self, ctx: RunContext) -> Trainer:
        raise NotImplementedError(f"{type(self).__name__} has no per-iteration trainer")

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        raise NotImplementedError

    def fit(self, ctx: RunContext) -> RunResult:
        raise NotImplementedError

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        """Steps a run takes (the progress bar's length): ``method.iterations`` T times
        ``method.steps_per_iteration`` s (issue 13: an iteration read as s steps; 1 where a method has no s)."""
        return int(cfg.method.iterations) * int(cfg.method.get("steps_per_iteration", 1))
