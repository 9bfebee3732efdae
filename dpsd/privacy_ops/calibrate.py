"""Noise calibration: solve the privacy mode's one noise parameter so that a ledger meets a target ε.

``privacy.epsilon`` is the target and ``privacy.calibrate`` names the ledger that must meet it
(DESIGN.md, "Privacy: two ledgers, always both"): ``claimed`` (the paper's own formula),
``rigorous`` (the standard accountant over every teacher query) or ``off`` (the noise parameter is
used as configured). The parameter solved for is the one the method names with
:meth:`Method.noise_parameter <dpsd.methods.base.Method.noise_parameter>` (DP-SGD:
``method.noise_multiplier``; PATE: ``method.sigma`` for GNMax, ``method.gamma`` for LNMax; by
default the privacy mode's, :data:`~dpsd.methods.base.NOISE_PARAMETERS`: the randomized response's
per-query ``privacy.query_epsilon`` in label mode, the Gaussian noise scale ``privacy.sigma`` in
data mode, ``beta`` kept). The ledger comes from the method's own ``plan_ledger``, so calibration
works for any registered method.

The solve is Brent's method (``scipy.optimize.brentq``) on ``log eps(x) - log target`` over
``log x`` in a fixed range; a target outside what the range reaches is a :class:`ConfigError`
that names the reachable interval (its floor is the ledger's ε at the most noise searched).
It is one-sided, as Opacus's ``get_noise_multiplier``: Brent's root is then moved towards more
noise until the ledger's ε is at most the target, so the solved noise meets the target from
below, within :data:`TOLERANCE` (never above it).
"""

from __future__ import annotations

import math

from omegaconf import DictConfig, OmegaConf
from scipy.optimize import brentq

from dpsd.data import DataInfo
from dpsd.errors import ConfigError
from dpsd.methods.base import Method

TOLERANCE = 0.005
"""A solution's ledger ε lies in [target (1 - TOLERANCE), target]."""

_LOG_INF = 1e3
"""Stand-in for log(inf) in the root-finder (an infinite ε is above any finite target)."""


def ledger_epsilon(cfg: DictConfig, ledger: str, method: type[Method], info: DataInfo) -> float:
    """The run ``cfg`` describes (of ``method`` on data ``info``), accounted on ``ledger`` (``claimed`` or
    ``rigorous``)."""
    planned = method.plan_ledger(cfg, info)
    if ledger == "claimed":
        if planned.claim is None:
            raise ConfigError(f"privacy.calibrate=claimed: method {cfg.method.name!r} states no claimed epsilon")
        return float(planned.claim.epsilon)
    return float(planned.summary(float(cfg.privacy.delta))["eps_rigorous"])


def _with(cfg: DictConfig, path: str, value: float) -> DictConfig:
    cfg = cfg.copy()
    OmegaConf.update(cfg, path, float(value), merge=False)
    return cfg


def calibrate(cfg: DictConfig, method: type[Method], info: DataInfo) -> DictConfig:
    """``cfg`` with its noise parameter solved so that the ``privacy.calibrate`` ledger gives at most
    ``privacy.epsilon`` and at least ``(1 - TOLERANCE)`` of it; ``cfg`` itself when calibration is off.

    A configured value that already meets the target is kept as it is, so calibrating twice
    changes nothing. ``cfg`` is expected to have passed :func:`dpsd.experiment.resolve_run`, which
    resolved its ``method`` (the class) and its data's ``info``.
    """
    privacy = cfg.privacy
    ledger = privacy.calibrate
    if ledger == "off":
        return cfg
    key, low, high = method.noise_parameter(cfg)
    target = float(privacy.epsilon)

    def excess(log_value: float) -> float:
        epsilon = ledger_epsilon(_with(cfg, key, math.exp(log_value)), ledger, method, info)
        if epsilon == math.inf:
            return _LOG_INF
        return math.log(max(epsilon, 1e-300)) - math.log(target)

    floor = math.log1p(-TOLERANCE)
    current = OmegaConf.select(cfg, key)
    if current is not None and current > 0 and floor <= excess(math.log(current)) <= 0:
        return cfg
    at_low, at_high = excess(math.log(low)), excess(math.log(high))
    if at_low * at_high > 0:
        ends = sorted(target * math.exp(value) if value < _LOG_INF else math.inf for value in (at_low, at_high))
        raise ConfigError(
            f"privacy.calibrate={ledger}: target epsilon {target:g} is out of reach; the {ledger} "
            f"ledger spans [{ends[0]:.4g}, {ends[1]:.4g}] (floor {ends[0]:.4g}) for {key} in "
            f"[{low:g}, {high:g}]"
        )
    log_value = brentq(excess, math.log(low), math.log(high), xtol=1e-7)
    # One-sided: step (doubling) towards the end of the range whose epsilon is below the target.
    towards, end = (-1.0, math.log(low)) if at_low < 0 else (1.0, math.log(high))
    step = 1e-7
    while excess(log_value) > 0:
        log_value = end if abs(end - log_value) <= step else log_value + towards * step
        step *= 2
    if excess(log_value) < floor:
        raise ConfigError(
            f"privacy.calibrate={ledger}: no {key} gives epsilon in [{target * (1 - TOLERANCE):g}, {target:g}] "
            f"(the ledger jumps there)"
        )
    return _with(cfg, key, math.exp(log_value))
