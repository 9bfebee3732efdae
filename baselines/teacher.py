"""``teacher``: the non-private teacher itself, released as the student (the reference row).

Every table's ceiling: what a model trained directly on the private data reaches, with no privacy
at all (eps = inf on both ledgers).
"""

from __future__ import annotations

import copy

from omegaconf import DictConfig

from dpsd.data import DataInfo
from dpsd.methods.base import Method, RunContext, RunResult, register_method
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.events import UnprotectedRelease


@register_method("teacher")
class Teacher(Method):
    """Releases a copy of the full-data teacher ``ctx.teachers[0]``."""

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = Ledger(notes=["reference row: the teacher trained on the private data, released as it is"])
        ledger.record(Teacher.release())
        return ledger

    @staticmethod
    def release() -> UnprotectedRelease:
        return UnprotectedRelease(count=1, note="the teacher's weights, trained on the private data without noise")

    @staticmethod
    def total_steps(cfg: DictConfig) -> int:
        return 0

    def fit(self, ctx: RunContext) -> RunResult:
        ctx.ledger.record(self.release())
        return RunResult(student=copy.deepcopy(ctx.teachers[0]).eval(), ledger=ctx.ledger)
