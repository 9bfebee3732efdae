"""``dfkd``: non-private data-free knowledge distillation, the upper bound of every data-free method.

DPSD's loop (:class:`dpsd.methods.dpsd.DPSD`) with no privatisation: the student learns the
teacher's soft outputs on synthetic samples from a generator trained against the teacher, in the
DFAD / Fast-DFKD style (Fang et al. 2019, 2022: BN-statistics matching plus student-teacher
disagreement; settings in ``conf/method/dfkd.yaml``). Whatever ``privacy`` says, it runs with
``privacy.mode = none``; its ledger reports eps = inf.
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, OmegaConf

from dpsd.data import DataInfo
from dpsd.methods.base import RunContext, RunResult, register_method
from dpsd.methods.dpsd import DPSD, plan_dpsd_ledger
from dpsd.privacy.accounting import Ledger


def without_privacy(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``privacy.mode = none`` (a new config; ``cfg`` is left as it is)."""
    return OmegaConf.merge(cfg, {"privacy": {"mode": "none"}})


@register_method("dfkd")
class DFKD(DPSD):
    """DPSD's Alg. 1 with ``privacy.mode = none`` and the teacher as the generator's discriminator."""

    @staticmethod
    def plan_ledger(cfg: DictConfig, info: DataInfo) -> Ledger:
        ledger = plan_dpsd_ledger(without_privacy(cfg), info)
        ledger.notes = ["non-private data-free KD (upper bound): the teacher's raw soft outputs train the "
                        "student and the generator; privacy settings are ignored (eps = inf)"]
        return ledger

    def fit(self, ctx: RunContext) -> RunResult:
        return super().fit(dataclasses.replace(ctx, cfg=without_privacy(ctx.cfg)))
