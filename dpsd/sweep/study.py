"""Hyper-parameter studies: a spec's ranges searched by Optuna through Ray Tune, the best configurations run again
at more seeds, every trial a recorded run.

A spec's ``search:`` block maps override keys to ranges, one distribution each (:data:`DISTRIBUTIONS`)::

    search:
      method.student_lr: {loguniform: [1.0e-4, 0.1]}
      method.output_step: {uniform: [0.01, 1.0]}
      method.latents: {choice: [trainable, resample]}
      ++method.iterations: {int: [100, 400]}

``dpsd sweep SPEC --search optuna --trials N`` (:func:`run_study`) searches them around the spec's one cell (its
base, its smoke list at ``scale=smoke``, the command line's overrides) with Ray Tune's ``OptunaSearch`` (Optuna's
TPE sampler, seeded), each trial one ``run_experiment`` at the spec's first seed, optionally under Ray Tune's
``ASHAScheduler`` (a trial reports once, when its run ends, so ASHA stops nothing early here: it only orders; the
flag is kept for specs whose trials differ in budget). Then the ``best`` configurations are run at the spec's
other seeds (``--seeds N``: seeds 1..N-1, the search's seed 0 and these N in all; :func:`study_seeds`).
``--dry-run`` prints :func:`plan_study`'s plan (:func:`format_plan`) and runs nothing. A spec whose ``directions:``
block names eps rigorous beside the accuracy (:mod:`dpsd.sweep.objectives`) is searched for the privacy–accuracy
trade-off: Optuna's multi-objective TPE, its Pareto front's configurations the ones run again.

Selection never sees the accuracy a reader is shown. The test split is cut once, by a fixed permutation, into a
*selection* half and a *held-out* half (:func:`split_halves`); each trial's student (recorded with its run) is
scored on both, logged as the run's ``selection_accuracy`` and ``held_out_accuracy``; the search maximises the first,
the report (:mod:`dpsd.report.study`) shows the second. The run's own ``student_test_accuracy`` (the whole test
split) stays as every run has it. Trials are tagged ``study`` (the spec's name), ``study_phase`` (``search`` or
``repeat``) and ``study_params`` (the sampled values, JSON), and as a sweep's cell is (``sweep``, ``cell``: the sampled
values and the seed, ``config_hash``), ``cell_status=done`` once both halves are logged: the runs archive
(``results/runs.csv``, :mod:`dpsd.report.runs`) then keeps them as it keeps every cell's run, with the columns the
study's page is rendered from (:data:`dpsd.report.runs.STUDY_COLUMNS`)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig

from dpsd.errors import ConfigError
from dpsd.sweep.objectives import PRIVACY, SELECTION, is_multi_objective, pareto_front, study_directions
from dpsd.sweep.spec import Spec, expand_configs, load_spec, override_key, with_seeds

DISTRIBUTIONS = ("loguniform", "uniform", "int", "choice")
HELD_OUT = "held_out_accuracy"
SPLIT_SEED = 0  # the permutation that cuts the test split into its selection and held-out halves
TRIALS, BEST = 20, 3  # a study's search trials and configurations run again, where its spec names none


def study_budget(spec: Spec) -> tuple[int, int]:
    """A study's search trials and the configurations it runs again: its spec's ``feeds.trials`` and ``feeds.best``
    (what its committed page was run with), else :data:`TRIALS` and :data:`BEST`."""
    feeds = dict(spec.feeds)
    return int(feeds.get("trials", TRIALS)), int(feeds.get("best", BEST))


def search_block(spec: Spec) -> dict[str, tuple[str, list]]:
    """The spec's ``search:`` ranges as ``{override key: (distribution, arguments)}``; a ConfigError names what is
    wrong (no block, an unknown distribution, bounds that are not two increasing numbers, an empty choice)."""
    raw = spec.search
    if not raw:
        raise ConfigError(f"sweep {spec.name}: a study needs a search: block mapping override keys to ranges "
                          f"({', '.join(f'{{{d}: ...}}' for d in DISTRIBUTIONS)})")
    space: dict[str, tuple[str, list]] = {}
    for key, entry in raw.items():
        if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in DISTRIBUTIONS:
            raise ConfigError(f"sweep {spec.name}: search.{key} must be one of {', '.join(DISTRIBUTIONS)} with its "
                              f"arguments (e.g. {{loguniform: [1.0e-4, 0.1]}}), got {entry!r}")
        kind, args = next(iter(entry.items()))
        if kind == "choice":
            if not isinstance(args, list) or not args:
                raise ConfigError(f"sweep {spec.name}: search.{key}: choice takes a non-empty list, got {args!r}")
        elif not (isinstance(args, list) and len(args) == 2 and all(isinstance(a, (int, float)) for a in args)
                  and args[0] < args[1] and (kind != "loguniform" or args[0] > 0)
                  and (kind != "int" or all(isinstance(a, int) for a in args))):
            raise ConfigError(f"sweep {spec.name}: search.{key}: {kind} takes [low, high] with low < high"
                              + (" (both > 0)" if kind == "loguniform" else " (integers)" if kind == "int" else "")
                              + f", got {args!r}")
        space[str(key)] = (kind, list(args))
    return space


def tune_space(space: dict[str, tuple[str, list]]) -> dict[str, Any]:
    """:func:`search_block`'s ranges as Ray Tune domains (which ``OptunaSearch`` turns into Optuna's)."""
    from ray import tune

    domains = {"loguniform": lambda a: tune.loguniform(*a), "uniform": lambda a: tune.uniform(*a),
               "int": lambda a: tune.randint(a[0], a[1] + 1), "choice": lambda a: tune.choice(a)}
    return {key: domains[kind](args) for key, (kind, args) in space.items()}


def study_overrides(spec: Spec, scale: str, overrides: Sequence[str]) -> list[str]:
    """What every trial composes before its sampled values: the spec's one cell at ``scale`` (a study searches
    around one cell: a grid or explicit cells are a ConfigError), less its seed and the keys the search sets."""
    configs = expand_configs(spec, scale, overrides)
    labels = {cell.label.rpartition(" seed=")[0] if " seed=" in cell.label else "" for cell, _ in configs}
    if len(labels) != 1:
        raise ConfigError(f"sweep {spec.name}: a study searches around one cell, the spec has {len(labels)} "
                          "(drop its grid: and cells:, or write a spec for the study)")
    searched = {override_key(k) for k in spec.search}
    return [o for o in configs[0][0].overrides
            if override_key(o) not in searched and override_key(o) != "seed"]


def trial_overrides(base: Sequence[str], params: dict[str, Any], seed: int) -> list[str]:
    """A trial's overrides: ``base``, then each sampled value (a float written so Hydra reads it back exactly)."""
    def value(v: Any) -> str:
        return repr(float(v)) if isinstance(v, float) else str(v)

    return [*base, *(f"{key}={value(v)}" for key, v in params.items()), f"seed={seed}"]


def split_halves(count: int, seed: int = SPLIT_SEED) -> tuple[list[int], list[int]]:
    """The test split's indices cut into a selection half and a held-out half by a fixed permutation."""
    import torch

    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed)).tolist()
    return sorted(order[:count // 2]), sorted(order[count // 2:])


def half_accuracies(cfg: DictConfig, run_id: str) -> dict[str, float]:
    """The recorded student of ``run_id`` scored on the selection and held-out halves of its test split."""
    import tempfile

    import torch
    from mlflow.tracking import MlflowClient
    from torch.utils.data import Subset

    from dpsd.config import resolve_device
    from dpsd.data import load_data
    from dpsd.models import build_classifier
    from dpsd.teachers import evaluate_accuracy
    from dpsd.tracking import tracking_uri

    data = load_data(cfg)
    student = build_classifier(cfg.model.student.arch, data.channels, data.image_size, data.num_classes)
    with tempfile.TemporaryDirectory() as tmp:
        path = MlflowClient(tracking_uri(cfg)).download_artifacts(run_id, "student.pt", tmp)
        state = torch.load(Path(path), map_location="cpu")
    student.load_state_dict({k.removeprefix("_module."): v for k, v in state.items()})  # Opacus wraps the student
    device = resolve_device(cfg.device)
    selection, held_out = split_halves(len(data.test))
    return {SELECTION: evaluate_accuracy(student.to(device), Subset(data.test, selection), device),
            HELD_OUT: evaluate_accuracy(student, Subset(data.test, held_out), device)}


def study_trial(config: dict, study: dict) -> None:
    """A Tune trial: one run at the sampled values (``config``; a repeat carries its own ``seed``), scored on the test
    split's two halves; reports ``selection_accuracy`` (what the search maximises) and both ledgers' ε
    (:data:`~dpsd.sweep.objectives.PRIVACY`: what a multi-objective search minimises beside it; a method that states
    no claim: NaN), or a one-line ``reason``."""
    from mlflow.tracking import MlflowClient
    from ray import tune

    from dpsd.cell_identity import config_hash
    from dpsd.config import compose
    from dpsd.experiment import run_experiment
    from dpsd.sweep.runner import one_line
    from dpsd.sweep.store import DONE
    from dpsd.threads import set_threads
    from dpsd.tracking import tracking_uri

    point = config.get("point", config)  # a repeat's values and seed come as one grid point
    params = {k: v for k, v in point.items() if k != "seed"}
    seed = int(point.get("seed", study["seed"]))
    set_threads(study["threads"])
    try:
        overrides = trial_overrides(study["base"], params, seed)
        cfg = compose(overrides)
        cfg.tracking.tags = {"study": study["name"], "study_phase": "repeat" if "seed" in point else "search",
                             "study_params": json.dumps(params, sort_keys=True), "scale": study["scale"],
                             # a cell as a sweep's is, so the runs archive keeps it (done: once both halves are in)
                             "sweep": study["name"], "cell": " ".join(overrides[len(study["base"]):]),
                             "config_hash": config_hash(cfg)}
        summary = run_experiment(cfg, show_progress=False)
        halves = half_accuracies(cfg, summary["run_id"])
        client = MlflowClient(tracking_uri(cfg))
        for key, value in halves.items():
            client.log_metric(summary["run_id"], key, value)
        client.set_tag(summary["run_id"], "cell_status", DONE)
    except Exception as err:  # a failed trial is reported, not raised: the search goes on
        tune.report({SELECTION: -math.inf, **{eps: math.inf for eps in PRIVACY}, "reason": one_line(err)})
        return
    privacy = summary["privacy"]
    epsilons = {eps: math.nan if privacy[eps] is None else float(privacy[eps]) for eps in PRIVACY}
    tune.report({SELECTION: halves[SELECTION], **epsilons, "run_id": summary["run_id"]})


def study_seeds(spec: Spec, seeds: int | None = None) -> tuple[int, list[int]]:
    """The search's seed and the seeds its best configurations are run again at: with ``seeds`` (``--seeds N``, as
    a sweep's: seeds 0..N-1 in all) seed 0, then 1..N-1; else the spec's first, then its others, or 1 and 2 where
    it names one."""
    if seeds is not None:
        first, *rest = with_seeds(spec, seeds).seeds
        return first, rest
    return spec.seeds[0], list(spec.seeds[1:]) if len(spec.seeds) > 1 else [1, 2]


def plan_study(spec_path: str, trials: int, scale: str = "smoke", overrides: Sequence[str] = (), best: int = 3,
               seeds: int | None = None) -> dict[str, Any]:
    """What :func:`run_study` would run, checked without running it: the spec, its ranges and objectives
    (:func:`dpsd.sweep.objectives.study_directions`), the overrides every trial composes, the search's seed and
    budget, the configurations run again and their seeds."""
    if trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {trials}")
    if best < 0:
        raise ConfigError(f"--best must be 0 or more, got {best}")
    spec = load_spec(spec_path)
    space = search_block(spec)
    seed, repeat_seeds = study_seeds(spec, seeds)
    return {"spec": spec, "space": space, "base": study_overrides(spec, scale, overrides), "seed": seed,
            "trials": trials, "best": best, "repeat_seeds": repeat_seeds, "scale": scale,
            "directions": study_directions(spec.name, spec.directions)}


def format_plan(plan: dict[str, Any]) -> str:
    """:func:`plan_study`'s plan as ``dpsd sweep --search --dry-run`` lists it: each trial's cell, the ranges its
    values are drawn from (Optuna's TPE draws each trial's values from the results before it, so no value is known
    before the search runs), and the repeats."""
    repeats = plan["best"] * len(plan["repeat_seeds"])
    width = max(map(len, plan["space"]))
    multi = is_multi_objective(plan["directions"])
    goals = ", ".join(f"{direction} {objective}" for objective, direction in plan["directions"])
    lines = [f"study {plan['spec'].name} at scale {plan['scale']} (dry run: nothing run)",
             f"  {plan['trials']} search trials, each one run of: {' '.join(plan['base'])} seed={plan['seed']}",
             f"  with its values drawn by Optuna's {'multi-objective ' if multi else ''}TPE (through Ray Tune, "
             f"seeded) to {goals}, from:",
             *(f"    {key:<{width}}  {kind} {args}" for key, (kind, args) in plan["space"].items()),
             f"  then the best {plan['best']} configurations{' on the Pareto front' if multi else ''} again at seeds "
             f"{plan['repeat_seeds']}: {repeats} runs",
             f"  {plan['trials'] + repeats} runs in all"]
    return "\n".join(lines)


def run_study(spec_path: str, trials: int, scale: str = "smoke", overrides: Sequence[str] = (),
              best: int = 3, seeds: int | None = None, scheduler: str | None = None, address: str | None = None,
              cpus_per_trial: float | None = None, gpus_per_trial: float | None = None) -> dict[str, Any]:
    """Search ``spec_path``'s ranges with ``trials`` Optuna trials, then run its ``best`` configurations (of a
    multi-objective study: its Pareto front's, most accurate first) at the other seeds (:func:`study_seeds`;
    ``seeds``: ``--seeds N``). Returns the trials' outcomes."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from dpsd.config import compose, resolve_paths
    from dpsd.sweep.runner import init_ray, trial_resources

    if scheduler not in (None, "asha"):
        raise ConfigError(f"--scheduler must be asha (or left out), got {scheduler!r}")
    plan = plan_study(spec_path, trials, scale, overrides, best, seeds)
    spec, space, base, seeds = plan["spec"], plan["space"], plan["base"], plan["repeat_seeds"]
    directions = plan["directions"]
    multi = is_multi_objective(directions)
    if multi and scheduler:
        raise ConfigError(f"sweep {spec.name}: --scheduler {scheduler} stops trials on one metric; a study with "
                          "several directions has none to stop on: leave --scheduler out")
    resolved = resolve_paths(compose(base))  # a Ray trial runs in a folder of its own: paths made absolute here
    base += [f"results_dir={resolved.results_dir}"] + ([f"data.root={resolved.data.root}"] if resolved.data.root else [])
    storage = str(Path(resolved.results_dir) / "ray")  # Tune's state beside the sweeps'
    stamp = time.strftime("%Y%m%d-%H%M%S")
    started = init_ray(address)
    try:
        resources = trial_resources(cpus_per_trial, gpus_per_trial)
        study = {"name": spec.name, "base": base, "seed": plan["seed"], "threads": resources.cpus, "scale": scale}
        trainable = tune.with_resources(tune.with_parameters(study_trial, study=study),
                                        {"cpu": resources.cpus, "gpu": resources.gpus})
        metrics, modes = [o for o, _ in directions], [d[:3] for _, d in directions]  # Tune's "max" / "min"
        search = OptunaSearch(metric=metrics if multi else SELECTION, mode=modes if multi else "max",
                              seed=plan["seed"])
        tuner = tune.Tuner(trainable, param_space=tune_space(space), tune_config=tune.TuneConfig(
            search_alg=search, num_samples=trials, max_concurrent_trials=resources.concurrent, reuse_actors=True,
            scheduler=ASHAScheduler(metric=SELECTION, mode="max") if scheduler == "asha" else None),
            run_config=tune.RunConfig(name=f"study-{spec.name}-{stamp}", storage_path=storage, verbose=0))
        found = [r for r in tuner.fit() if r.metrics and math.isfinite(r.metrics.get(SELECTION, -math.inf))]
        found.sort(key=lambda r: r.metrics[SELECTION], reverse=True)
        if multi:  # the configurations run again are the Pareto front's, most accurate first
            front = pareto_front([[r.metrics[o] for o, _ in directions] for r in found], directions)
            found = [found[i] for i in front] + [r for i, r in enumerate(found) if i not in front]
        chosen = [{k: r.config[k] for k in space} for r in found[:best]]
        repeats = []
        if chosen and seeds:
            points = [{**params, "seed": seed} for params in chosen for seed in seeds]
            again = tune.Tuner(trainable, param_space={"point": tune.grid_search(points)},
                tune_config=tune.TuneConfig(max_concurrent_trials=resources.concurrent, reuse_actors=True),
                run_config=tune.RunConfig(name=f"study-{spec.name}-{stamp}-repeat", storage_path=storage, verbose=0))
            repeats = list(again.fit())
    finally:
        if started:
            import ray

            ray.shutdown()
    return {"study": spec.name, "trials": len(found), "best": chosen, "repeats": len(repeats)}
