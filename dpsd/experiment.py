"""The one flow: config -> data -> teacher(s) -> method.fit -> evaluate -> MLflow.

Data moves one way. The runner resolves what the config names once (:func:`resolve_run`: the method's class,
the teacher's input convention, the data's shape) and hands it down, prepares a :class:`RunContext`, lets the
method train, measures test accuracy on the held-out split (never used for training or selection: the final
iterate is reported), turns the ledger into both epsilon figures and records everything.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from dpsd.checkpoint import Checkpointer
from dpsd.cell_identity import config_hash
from dpsd.config import resolve_device, resolve_paths, validate
from dpsd.data import DataInfo, WatchedSplit, data_info, input_convention, load_data
from dpsd.errors import ConfigError, Fault
from dpsd.input_space import InputConvention
from dpsd.methods import METHODS
from dpsd.methods.base import Method, RunContext
from dpsd.privacy.accounting import Ledger
from dpsd.privacy.boundary import Accesses, CountedTeacher, reconcile, watching, zero_epsilon_shortfall
from dpsd.privacy_ops.calibrate import calibrate
from dpsd.progress import ProgressLog, is_terminal
from dpsd.teachers import evaluate_accuracy, load_or_train_teacher
from dpsd.version import code_version, git_commit, method_code_version

FIGURES = ("eps_claimed", "eps_rigorous", "eps_rigorous_rdp", "eps_rigorous_pld")
"""The ledger's epsilons every run reports as metrics."""


@dataclasses.dataclass(frozen=True)
class RunSetup:
    """What a run's config names, resolved once before any data is read (:func:`resolve_run`) and handed to
    each step that needs it."""

    method: type[Method]  # the registered class of ``method.name``
    convention: InputConvention  # model.teacher.input: the data is loaded in it, the teacher keyed by it
    info: DataInfo  # the data's classes, channels, image side and input space (without its size)


def check_method(cfg: DictConfig, method: type[Method]) -> None:
    """The settings ``method`` (the class of ``cfg.method.name``) must agree with: a checkpoint only where it can
    resume, then its own :meth:`~dpsd.methods.base.Method.check_config`."""
    if cfg.checkpoint.every_steps and not method.resumable(cfg):
        resumable = ", ".join(name for name in METHODS.names() if METHODS.get(name).resumable is not Method.resumable)
        raise ConfigError(f"checkpoint.every_steps: method {cfg.method.name!r} with these settings cannot resume "
                          f"from a checkpoint; methods that can: {resumable}")
    method.check_config(cfg)


def resolve_run(cfg: DictConfig) -> RunSetup:
    """Reject settings no run could honour, before any data is read or model trained (one line each), and
    resolve once what every later step reads: the teacher's input convention and the data it gives (an unknown
    dataset or option stops here), the method's class, the config's own checks (:func:`dpsd.config.validate`)
    and the method's (:func:`check_method`)."""
    convention = input_convention(cfg)
    info = data_info(cfg, convention)
    method = METHODS.get(cfg.method.name)
    validate(cfg, info)
    check_method(cfg, method)
    return RunSetup(method, convention, info)


def prepare(cfg: DictConfig) -> tuple[DictConfig, RunSetup]:
    """``cfg`` resolved (:func:`resolve_run`), calibrated (the solved noise is part of the logged config) and with
    absolute paths, as a run logs it, and its :class:`RunSetup`."""
    setup = resolve_run(cfg)
    return resolve_paths(calibrate(cfg, setup.method, setup.info)), setup


def check_finite(step: int, metrics: dict[str, float]) -> None:
    """Stop the run at the first NaN or infinite loss term a method reports, naming the step."""
    bad = {name: value for name, value in metrics.items() if not math.isfinite(value)}
    if bad:
        terms = ", ".join(f"{name} = {value}" for name, value in bad.items())
        raise Fault(f"step {step}: {terms}; the run stopped instead of training on")


def checkpointer(cfg: DictConfig) -> Checkpointer | None:
    """The run's :class:`~dpsd.checkpoint.Checkpointer` where ``checkpoint.every_steps`` asks for one: a file named
    by the method and the config's hash (:func:`dpsd.cell_identity.config_hash`), so the same cell finds it again, kept
    only for the same code of the method (:func:`dpsd.version.method_code_version`)."""
    every = int(cfg.checkpoint.every_steps)
    if not every:
        return None
    path = Path(cfg.checkpoint.dir) / f"{cfg.method.name}-{config_hash(cfg)}.pt"
    return Checkpointer(path=path, every=every, code=method_code_version(cfg.method.name))


def privacy_report(cfg: DictConfig) -> dict[str, Any]:
    """Both epsilon ledgers for the run ``cfg`` describes, without reading data or training.

    With ``privacy.calibrate`` on, the noise is calibrated first and ``calibration`` says which
    parameter was solved, to what value, for which ledger and target.
    """
    cfg, setup = prepare(cfg)
    method = setup.method
    ledger = method.plan_ledger(cfg, setup.info)
    report = {"method": cfg.method.name, "privacy_mode": cfg.privacy.mode}
    if cfg.privacy.calibrate != "off":
        key = method.noise_parameter(cfg)[0]
        report["calibration"] = {"ledger": cfg.privacy.calibrate, "target_epsilon": cfg.privacy.epsilon,
                                 "parameter": key, "value": OmegaConf.select(cfg, key)}
    return {**report, **ledger.summary(float(cfg.privacy.delta))}


def published_privacy(cfg: DictConfig, accesses: Accesses, ledger: Ledger, plan: Ledger) -> dict:
    """The run's ledger summary, once its releases account for everything the method touched and equal its plan
    (:func:`dpsd.privacy.boundary.reconcile`); a shortfall stops the run in one line, nothing published. (A run
    resumed from a checkpoint counts the accesses since the resume against every release: never fewer.)"""
    method = cfg.method.name
    shortfalls = reconcile(method, accesses, ledger.events, plan.events, ledger.covers_image_use())
    summary = ledger.summary(float(cfg.privacy.delta)) if not shortfalls else {}
    shortfalls = shortfalls or zero_epsilon_shortfall(method, accesses, summary["eps_rigorous"])
    if shortfalls:
        more = f" (and {len(shortfalls) - 1} more: {'; '.join(shortfalls[1:])})" if len(shortfalls) > 1 else ""
        raise ConfigError(f"privacy boundary: {shortfalls[0]}{more}; nothing was published")
    return summary


def run_experiment(cfg: DictConfig, show_progress: bool = True) -> dict[str, Any]:
    """Train, evaluate, account and record one run; returns its summary."""
    run_start = time.perf_counter()
    cfg, setup = prepare(cfg)
    device = resolve_device(cfg.device)
    if cfg.tracking.enabled:
        from dpsd.tracking import check_tracking

        check_tracking(cfg)
    torch.manual_seed(int(cfg.seed))
    data = load_data(cfg, setup.convention)
    method_cls = setup.method
    # The full-data teacher: the one DPSD transcribes, and every run's reference accuracy. Methods
    # with teacher ensembles (PATE, DGD, FedDPSD) build their members through the same cache.
    teacher, teacher_record = load_or_train_teacher(cfg, data, device)
    plan = method_cls.plan_ledger(cfg, dataclasses.replace(setup.info, records=len(data.train)))
    ledger = plan.planned()
    torch.manual_seed(int(cfg.seed))  # the same initial weights whether the teacher was cached or trained
    rng = torch.Generator(device=device).manual_seed(int(cfg.seed))
    total = method_cls.total_steps(cfg)
    log = ProgressLog(cfg.method.name, total) if show_progress and not is_terminal() else None
    with tqdm(total=total, desc=cfg.method.name, unit="it", disable=None if show_progress and log is None else True) as bar:

        stride = max(1, total // 100)

        def progress(step: int, metrics: dict[str, Any]) -> None:
            # metrics may be device tensors: read (a host sync) only when a line or the bar shows
            # them, and by the finiteness check (the one read per step)
            check_finite(step, metrics)
            if log is not None:
                log.update(step, metrics)
            if (step + 1) % stride == 0 and not bar.disable:
                bar.set_postfix({k: f"{float(v):.3f}" for k, v in metrics.items()}, refresh=False)
            bar.update(step + 1 - bar.n)  # a resumed run's first step jumps to where its checkpoint was

        def phase_log(desc: str, phase_total: int) -> ProgressLog | None:
            return ProgressLog(f"{cfg.method.name} {desc}", phase_total) if log is not None else None

        # the privacy boundary: the method holds the private split and the teachers as counted handles, and what
        # they count is reconciled with its ledger and its plan before anything is published
        private, accesses = WatchedSplit(data.train), Accesses(records=len(data.train))
        ctx = RunContext(cfg=cfg, data=dataclasses.replace(data, train=private),
                         teachers=[CountedTeacher(teacher, accesses)], device=device, rng=rng, ledger=ledger,
                         progress=progress, phase_log=phase_log, checkpoint=checkpointer(cfg))
        train_start = time.perf_counter()
        with watching(accesses):
            result = method_cls().fit(ctx)
        time_train = time.perf_counter() - train_start
    accesses.image_reads, accesses.label_reads, accesses.consumed = private.image_reads, private.label_reads, private.consumed
    privacy = published_privacy(cfg, accesses, result.ledger, plan)
    metrics = {
        "student_test_accuracy": evaluate_accuracy(result.student, data.test, device),
        "teacher_test_accuracy": teacher_record["test_accuracy"],
        # a teacher trained to a target (model.teacher.recipe.target): the steps it took and where it stopped
        **({"teacher_steps": teacher_record["training"]["steps"],
            "teacher_val_accuracy": teacher_record["training"]["val_accuracy"]} if "training" in teacher_record else {}),
        **{key: privacy[key] for key in FIGURES},
        "delta": privacy["delta"],
        "queries": privacy["queries"],
        # the privacy boundary's counts of what fit touched: private images and labels read as they are, answers
        # of the full-data teacher, and the most any ensemble member gave (0 reads: a data-free fit, measured)
        "private_image_reads": float(accesses.image_reads.sum()),
        "private_label_reads": float(accesses.label_reads.sum()),
        "teacher_answers": float(accesses.teacher_answers),
        "member_answers_max": float(max(accesses.member_answers.values(), default=0)),
        # a method's partial figure (e.g. DGD's eps_labels_only), under its own name
        **{key: value for key, value in privacy.items() if key.startswith("eps_") and key not in FIGURES},
        **{name: float(value) for name, value in result.metrics.items()},
        # wall seconds: the method's fit (a resumed run's before its checkpoint too), and the whole run (data,
        # teacher, fit, evaluation) before recording
        "time_train_s": time_train + result.metrics.get("train_s_before_resume", 0.0),
        "time_total_s": time.perf_counter() - run_start,
    }
    summary = {"metrics": metrics, "privacy": privacy, "teacher": teacher_record, "run_id": None}
    if cfg.tracking.enabled:
        from dpsd import tracking

        models = {"student": result.student}
        if result.generator is not None:
            models["generator"] = result.generator
        tags = {"method": cfg.method.name, "dataset": cfg.dataset.name, "scale": cfg.scale.name,
                "privacy_mode": cfg.privacy.mode, "code_version": code_version(), "git_commit": git_commit(),
                "teacher_weights_sha256": teacher_record["weights_sha256"],
                # tags keep what metrics cannot: an infinite epsilon, the ledger's words
                **{key: str(privacy[key]) for key in ("eps_claimed", "eps_rigorous", "claimed_notion",
                                                       "claimed_source", "accountant", "neighbouring")}}
        recorded = tracking.record_run(cfg, metrics, privacy, models, result.samples, tags)
        summary.update(run_id=recorded.run_id, tracking_uri=recorded.uri, tracking_fallback=recorded.fallback)
    if ctx.checkpoint is not None:  # the run is kept (recorded, or returned untracked): its checkpoint is not needed
        ctx.checkpoint.discard()
    return summary
