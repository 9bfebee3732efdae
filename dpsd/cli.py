"""The ``dpsd`` command.

    dpsd run [overrides] [--json PATH]
                                     train, evaluate, account and record one run (--json: its summary as JSON);
                                     its progress and summary also in <results_dir>/logs/run-<time>-<pid>.log
    dpsd quickstart [overrides] [--json PATH] [--out reports]
                                     the benchmark: every method on the embedded digits at one epsilon
                                     (sweeps/quickstart.yaml), one comparison table, reports/index.html
    dpsd teacher [overrides]         train (or find in the cache) the teacher a run would use
    dpsd privacy-report [overrides] [--vary key=v1,v2,...]
                                     both epsilon ledgers for a run, as JSON, without training;
                                     with --vary (repeatable: a grid), a table over the values
    dpsd audit mechanism [overrides] [--trials N] [--confidence 0.95] [--source code|event] [--releases R]
                                     an empirical lower bound on the mechanism's epsilon, as JSON
    dpsd audit run [overrides] [--canaries M] [--confidence 0.95]
                                     one-run canary audit (Steinke, Nasr, Jagielski 2023): an epsilon
                                     lower bound from M mislabelled canaries, beside both ledgers
    dpsd audit model <run id | artifact folder> [key=value ...] [--samples N] [--synthetic M]
                                     membership inference against a run's student, generator and
                                     teacher (AUC, TPR at FPR 1% and 0.1%), as JSON
    dpsd sweep <spec> [scale=check|smoke|laptop|paper] [overrides] [--address ADDR] [--dry-run] [--rerun-stale]
               [--match REGEX] [--claim-timeout S]
                                     run a sweep spec's cells not yet done (Ray Tune, MLflow)
    dpsd report [--scale check|smoke|laptop|paper] [--only SPEC ...] [--out reports] [--markdown PATH] [--archive CSV] [--datasets A,B] [overrides]
                                     every spec's table (Markdown, LaTeX, HTML), curves, sensitivity
                                     plots, sample grids and index.html, from the recorded runs
    dpsd pages [--manifest results/pages.yaml] [--page PATH ...] [overrides]
                                     every committed page (results/*.md, README's verdict) from the
                                     recorded runs, as results/pages.yaml lists them, in one pass
    dpsd reproduce [--scale check|smoke|laptop|paper|pages] [--only SPEC ...] [--dry-run] [--rerun-stale] [--cpus-per-trial N] [overrides]
                                     the sweeps (whatever is missing), then the report; prints how long
                                     from the recorded runs' timings, then progress (also in a log);
                                     default --scale check: the pipeline check (smoke's sizes shrunk by
                                     sweeps/common/check.yaml, students near chance by design);
                                     --scale pages: each spec at the scale its page in results/pages.yaml uses
    dpsd new method NAME --from EXISTING
                                     a new method copied from EXISTING: module, YAML, its per-scale
                                     files, the registering import and a test stub; prints what is left
    dpsd sync [results/fallback] [--to URI]
                                     copy the runs a tracking server missed (kept in the local
                                     fallback store) to it
    dpsd checkpoint save FOLDER [overrides] [--teachers GLOB]
    dpsd checkpoint restore FOLDER [overrides]
                                     copy a checkpointed run's checkpoints and cached teachers to
                                     FOLDER, and back into another results_dir, to resume it elsewhere
    dpsd checkpoint peek CHECKPOINT [overrides] | compare OLDER NEWER
                                     a run in progress: its student's test accuracy and generator's
                                     spread, or how far its weights moved between two checkpoints

Overrides are Hydra's: ``dataset=mnist data.root=../shared/data privacy=label privacy.epsilon=1``.
A bad setting ends the command with one line on stderr and exit status 2; a fault outside the config
(tracking server away, NaN loss) with one line and exit status 1.
"""

from __future__ import annotations

from dpsd.threads import set_threads, wait_passively

wait_passively()  # before torch is imported (by any command): its OpenMP runtime reads it when loaded

import argparse
import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

from dpsd import jsonio, progress
from dpsd.errors import ConfigError, Fault


def _dumps(payload: Any) -> str:
    """Strict JSON (:mod:`dpsd.jsonio`: an infinite epsilon as the string "inf")."""
    return jsonio.dumps(payload, indent=2, default=str)


def print_summary(summary: dict[str, Any]) -> None:
    from dpsd.report.tables import fmt_eps

    metrics, privacy = summary["metrics"], summary["privacy"]
    lines = [
        "",
        f"teacher test accuracy   {metrics['teacher_test_accuracy']:.4f}",
        f"student test accuracy   {metrics['student_test_accuracy']:.4f}",
        f"eps_claimed             {fmt_eps(privacy['eps_claimed'], 'inf')}  "
        + (f"({privacy['claimed_notion']}, {privacy['claimed_source']})" if privacy["claimed_source"] else "(no privacy claimed)"),
        f"eps_rigorous            {fmt_eps(privacy['eps_rigorous'], 'inf')}  ((eps, delta)-DP, neighbouring = {privacy['neighbouring']}, {privacy['accountant']}; delta = {privacy['delta']:g}, {privacy['queries']} private releases)",
    ]
    lines += [f"{key:<24}{fmt_eps(value, 'inf')}  (the protected releases only; not what an attacker faces)"
              for key, value in privacy.items() if key not in ("eps_claimed",) and key.startswith("eps_")
              and not key.startswith("eps_rigorous")]
    # one line per kind of unprotected release, with its count (dpsd.privacy.accounting.Ledger.uncovered)
    lines += [f"uncovered: {what}" for what in privacy["uncovered"]]
    lines += [f"note: {note}" for note in privacy["notes"]]
    if summary.get("run_id"):
        lines += [
            f"MLflow run {summary['run_id']} in {summary['tracking_uri']}",
            f"  open with: mlflow ui --host 127.0.0.1 --backend-store-uri {summary['tracking_uri']}",
        ]
    if summary.get("tracking_fallback"):
        folder = summary["tracking_uri"].removeprefix("sqlite:///").removesuffix("/mlflow.db")
        lines += [f"not recorded on the server ({summary['tracking_fallback']}): the run is in the local fallback store",
                  f"  push it once the server is back: dpsd sync {folder}"]
    print("\n".join(lines))
    for line in lines:
        progress.keep(line)


def _parser(command: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"dpsd {command}", description=description)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    return parser


def check_added_keys(overrides: list[str] | tuple[str, ...]) -> None:
    """Every key ``overrides`` add with ``+``/``++`` outside ``method.`` (the method's own check) against the typed
    schema, :class:`dpsd.config.RunConfig`: Hydra lets ``+`` add a key a dataclass does not declare, which nothing would read, so
    ``+privacy.epsilonn=5`` is refused in one line naming the node's settings. Below a field that is not a dataclass
    (``tracking.tags``, ``dataset.options``, ``model``: free-form) any key is accepted."""
    import re
    from dataclasses import is_dataclass
    from typing import get_type_hints

    from dpsd.config import RunConfig

    for override in overrides:
        match = re.match(r"\+\+?([\w.]+)=", override)
        if not match or match.group(1).startswith("method."):
            continue
        node, path = RunConfig, []
        for name in match.group(1).split("."):
            types = get_type_hints(node)
            if name not in types:
                where = ".".join(path) or "the config"
                raise ConfigError(f"{match.group(1)}: {where} has no such setting, so the override would be ignored; "
                                  f"its settings: {', '.join(sorted(types))}")
            if not is_dataclass(types[name]):
                break
            node, path = types[name], [*path, name]


def compose_run(overrides: list[str]):
    """The config of the one run ``overrides`` describe (``dpsd run``, ``privacy-report``, ``teacher``, ``audit``,
    ``checkpoint peek``): every added key checked (:func:`check_added_keys`), and a method key one the chosen method
    declares (``compose(strict=True)``)."""
    from dpsd.config import compose

    check_added_keys(overrides)
    return compose(overrides, strict=True)


def cmd_run(args: list[str]) -> None:
    from dpsd.experiment import run_experiment
    from dpsd.tracking import whole_run_wall

    parser = _parser("run", "train, evaluate, account and record one run")
    parser.add_argument("--json", metavar="PATH", help="also write the run summary (every metric, both ledgers) as JSON")
    parsed = parser.parse_intermixed_args(args)
    cfg = compose_run(parsed.overrides)
    log = run_log(cfg)
    print(f"progress log: {log}", flush=True)
    progress.log_to(log)
    progress.keep(" ".join(["dpsd run", *args]))
    note = untargeted_epsilon_note(cfg)
    if note:
        print(note, flush=True)
        progress.keep(note)
    try:
        try:
            with progress.keep_alive(f"dpsd run {cfg.method.name}"):
                summary = run_experiment(cfg)
            summary["metrics"].update(whole_run_wall(summary["metrics"]))  # as recorded, tracked or not
        except KeyboardInterrupt:
            left = interrupted_run(cfg)
            progress.keep(f"interrupted: {left}")
            raise KeyboardInterrupt(left) from None
        print_summary(summary)
    finally:
        progress.log_to(None)
    if parsed.json:
        write_json(parsed.json, summary)


UNTARGETED_TOLERANCE = 0.01
"""How far (relative) a planned claimed epsilon may sit from ``privacy.epsilon`` before :func:`untargeted_epsilon_note`
speaks: DP-SGD's accountant meets its own target to a few parts in a thousand."""


def untargeted_epsilon_note(cfg) -> str | None:
    """A note, before a run computes anything, when the ``privacy.epsilon`` it was given is not what it will spend:
    with ``privacy.calibrate=off`` a method's own noise settings set the spend (PATE's sigma, DGD's per-query
    epsilon, DPSD's data-mode sigma), and the claimed epsilon its plan gives (:func:`dpsd.experiment.privacy_report`,
    which reads no data) differs from the target by more than :data:`UNTARGETED_TOLERANCE`. None when the run
    calibrates, is not private or names no target."""
    from omegaconf import OmegaConf

    from dpsd.experiment import privacy_report
    from dpsd.report.tables import fmt_eps

    target = OmegaConf.select(cfg, "privacy.epsilon")
    if cfg.privacy.mode == "none" or target is None or cfg.privacy.calibrate != "off":
        return None
    report = privacy_report(cfg)
    planned, target = float(report["eps_claimed"]), float(target)
    if abs(planned - target) <= UNTARGETED_TOLERANCE * target:
        return None
    return (f"note: privacy.epsilon={target:g} is not this run's budget: with privacy.calibrate=off "
            f"{cfg.method.name}'s own noise settings plan eps_claimed {fmt_eps(planned, 'inf')} "
            f"(eps_rigorous {fmt_eps(float(report['eps_rigorous']), 'inf')}); privacy.calibrate=claimed or "
            "rigorous solves the noise for the target")


def run_log(cfg) -> Path:
    """Where a ``dpsd run`` keeps its progress lines and summary: ``<results_dir>/logs/run-<time>-<pid>.log`` (beside
    ``dpsd reproduce``'s ``<results_dir>/ray/reproduce-<time>.log``; the process id keeps two runs started in one
    second apart)."""
    return Path(cfg.results_dir).expanduser().resolve() / "logs" / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def interrupted_run(cfg) -> str:
    """What an interrupted ``dpsd run`` leaves: its checkpoint and the step it holds, where the run writes one."""
    from dpsd.experiment import checkpointer, prepare

    saved = checkpointer(prepare(cfg)[0])  # named as run_experiment names it
    if saved is None or not saved.path.is_file():
        return "nothing recorded"
    return f"nothing recorded; checkpoint at step {steps_done(saved.path)} ({saved.path}): the same command resumes from it"


def write_json(path: str, payload: Any) -> None:
    """``payload`` as JSON at ``path`` (parent folders made), infinite epsilons written "inf"."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(_dumps(payload) + "\n")


def cmd_teacher(args: list[str]) -> None:
    from dpsd.config import resolve_device, resolve_paths
    from dpsd.data import load_data
    from dpsd.experiment import resolve_run
    from dpsd.teachers import load_or_train_teacher

    overrides = _parser("teacher", "train (or find in the cache) the teacher a run would use").parse_args(args).overrides
    cfg = compose_run(overrides)
    setup = resolve_run(cfg)
    cfg = resolve_paths(cfg)
    _, record = load_or_train_teacher(cfg, load_data(cfg, setup.convention), resolve_device(cfg.device))
    print(_dumps(record))


VARY_COLUMNS = ("neighbouring", "eps_claimed", "eps_rigorous_rdp", "eps_rigorous_pld", "eps_rigorous", "queries")


def _parse_vary(spec: str) -> tuple[str, list[str]]:
    key, sep, values = spec.partition("=")
    if not sep or not key or not values:
        raise ConfigError(f"--vary expects key=v1,v2,..., got {spec!r}")
    return key, values.split(",")


def _cell(value: Any) -> str:
    from dpsd.report.tables import fmt_eps

    if value is None:
        return "-"
    if isinstance(value, float):
        return fmt_eps(value, "inf")
    return str(value)


def vary_table(overrides: list[str], vary: list[str]) -> str:
    """The privacy report for every combination of the ``--vary`` values, as an aligned table
    (the calibrated parameter gets a column when ``privacy.calibrate`` is on)."""
    from dpsd.experiment import privacy_report

    axes = [_parse_vary(spec) for spec in vary]
    keys = [key for key, _ in axes]
    rows = []
    for combination in itertools.product(*(values for _, values in axes)):
        report = privacy_report(compose_run([*overrides, *(f"{k}={v}" for k, v in zip(keys, combination))]))
        solved = report.get("calibration")
        extra = {solved["parameter"]: solved["value"]} if solved else {}
        rows.append({**dict(zip(keys, combination)), **extra, **{c: report[c] for c in VARY_COLUMNS}})
    header = list(dict.fromkeys(key for row in rows for key in row))
    cells = [header] + [[_cell(row.get(key)) for key in header] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(width) for cell, width in zip(line, widths)).rstrip() for line in cells)


def cmd_privacy_report(args: list[str]) -> None:
    from dpsd.experiment import privacy_report

    parser = _parser("privacy-report", "both epsilon ledgers for a run, without training")
    parser.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,...",
                        help="repeat the report for each value (several --vary: every combination), as a table")
    parsed = parser.parse_intermixed_args(args)
    if parsed.vary:
        print(vary_table(parsed.overrides, parsed.vary))
    else:
        print(_dumps(privacy_report(compose_run(parsed.overrides))))


def cmd_audit_model(args: list[str]) -> None:
    from dpsd import tracking
    from dpsd.privacy_ops.model_audit import audit_run, flat_metrics

    parser = argparse.ArgumentParser(prog="dpsd audit model", description="membership inference against a run's models")
    parser.add_argument("run", help="an MLflow run id (in the store the overrides name) or a folder of its artifacts")
    parser.add_argument("overrides", nargs="*", help="dotted overrides of the run's config: data.root=..., device=cpu")
    parser.add_argument("--samples", type=int, default=1000, help="members, and as many non-members")
    parser.add_argument("--synthetic", type=int, default=2000, help="generator samples for the distance attack")
    parsed = parser.parse_intermixed_args(args)
    cfg, result = audit_run(parsed.run, parsed.overrides, parsed.samples, parsed.synthetic)
    if cfg.tracking.enabled:
        tags = {"kind": "audit", "target": "model", "audited_run": result["audited_run"], "method": cfg.method.name}
        result["run_id"] = tracking.record_report(cfg, flat_metrics(result), tags, result, "model_audit.json")
    print(_dumps(result))


def cmd_audit_run(args: list[str]) -> None:
    from dpsd.config import compose
    from dpsd.experiment import prepare
    from dpsd.privacy_ops.canary import audit_one_run

    parser = argparse.ArgumentParser(prog="dpsd audit run", description="one-run canary audit (Steinke et al. 2023)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    parser.add_argument("--canaries", type=int, default=500, help="mislabelled private records, each in with probability 1/2")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--synthetic", type=int, default=2000, help="generated samples for the generator's distance score")
    parsed = parser.parse_intermixed_args(args)
    cfg, _ = prepare(compose_run(parsed.overrides))
    result = audit_one_run(cfg, parsed.canaries, parsed.confidence, parsed.synthetic)
    if cfg.tracking.enabled:
        from dpsd import tracking

        tags = {"kind": "audit", "target": "run", "method": cfg.method.name, "neighbouring": result["neighbouring"]}
        metrics = {key: result[key] for key in ("eps_lower_bound", "eps_claimed", "eps_rigorous", "canaries",
                                                "student_test_accuracy")}
        result["run_id"] = tracking.record_report(cfg, metrics, tags, result, "canary_audit.json")
    print(_dumps(result))


def cmd_audit(args: list[str]) -> None:
    if args[:1] == ["model"]:
        return cmd_audit_model(args[1:])
    if args[:1] == ["run"]:
        return cmd_audit_run(args[1:])
    from dpsd.config import compose
    from dpsd.experiment import prepare
    from dpsd.privacy_ops.audit import SOURCES, audit_code_path, audit_mechanism, record_audit

    parser = argparse.ArgumentParser(prog="dpsd audit", description="empirical lower bound on a mechanism's epsilon")
    parser.add_argument("target", choices=["mechanism", "model"])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    parser.add_argument("--trials", type=int, default=100_000, help="runs of the mechanism per world")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--source", choices=SOURCES, default="code",
                        help="code: drive the method's own annotator (default); event: sample the planned ledger event")
    parser.add_argument("--releases", type=int, default=1, help="--source code: teacher queries per trial")
    parsed = parser.parse_intermixed_args(args)
    cfg, _ = prepare(compose_run(parsed.overrides))
    if parsed.source == "code":
        result = audit_code_path(cfg, parsed.trials, parsed.confidence, parsed.releases)
    else:
        result = audit_mechanism(cfg, parsed.trials, parsed.confidence)
    if cfg.tracking.enabled:
        result["run_id"] = record_audit(cfg, result)
    print(_dumps(result))


def _add_trial_resources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cpus-per-trial", type=float, help="default: every CPU of the largest node")
    parser.add_argument("--gpus-per-trial", type=float, help="default: 0.5 where there are GPUs, else 0")


def cmd_sweep(args: list[str]) -> int:
    from dpsd.sweep.runner import CLAIM_TIMEOUT, run_sweep
    from dpsd.sweep.spec import split_scale
    from dpsd.sweep.summary import format_summary

    parser = argparse.ArgumentParser(prog="dpsd sweep", description="run a sweep spec's cells with Ray Tune")
    parser.add_argument("spec", help="a spec file, or the name of one in sweeps/")
    parser.add_argument("overrides", nargs="*", help="scale=check|smoke|laptop|paper (default smoke) and Hydra overrides for every cell")
    parser.add_argument("--address", help="an existing Ray cluster (default: a local one)")
    parser.add_argument("--dry-run", action="store_true", help="list the cells to run, stale and done (with --search: "
                        "the trials and repeats); run nothing")
    parser.add_argument("--rerun-stale", action="store_true", help="also re-run cells recorded by other code versions")
    parser.add_argument("--match", metavar="REGEX",
                        help="run only the cells whose label matches (e.g. 'steps_per_iteration=(1|10) '); "
                             "--dry-run lists the labels")
    parser.add_argument("--seeds", type=int, metavar="N",
                        help="run every cell at seeds 0..N-1 (default: the spec's seeds: list, else seed 0); with "
                             "--search: the search at seed 0, its best configurations again at seeds 1..N-1")
    _add_trial_resources(parser)
    _add_archive_choice(parser)
    parser.add_argument("--search", choices=["optuna"],
                        help="search the spec's search: ranges with Optuna (through Ray Tune) instead of running its "
                             "cells; then run the best configurations at more seeds (dpsd report --study SPEC)")
    parser.add_argument("--trials", type=int,
                        help="with --search: the search's trials (default: the spec's feeds.trials, else 20)")
    parser.add_argument("--best", type=int,
                        help="with --search: configurations run again (default: the spec's feeds.best, else 3)")
    parser.add_argument("--scheduler", choices=["asha"], help="with --search: Ray Tune's ASHA scheduler")
    parser.add_argument("--claim-timeout", type=float, default=CLAIM_TIMEOUT, metavar="SECONDS",
                        help="take over another driver's claim on a cell after this long without its heartbeat "
                             f"(default {CLAIM_TIMEOUT:g})")
    parsed = parser.parse_intermixed_args(args)
    scale, overrides = split_scale(parsed.overrides)
    if parsed.search:
        from dpsd.sweep.spec import load_spec
        from dpsd.sweep.study import format_plan, plan_study, run_study, study_budget

        trials, best = study_budget(load_spec(parsed.spec))
        budget = {"trials": parsed.trials or trials, "best": best if parsed.best is None else parsed.best,
                  "seeds": parsed.seeds}
        if parsed.dry_run:
            print(format_plan(plan_study(parsed.spec, scale=scale, overrides=overrides, **budget)))
            return 0
        found = run_study(parsed.spec, scale=scale, overrides=overrides, **budget, scheduler=parsed.scheduler,
                          address=parsed.address, cpus_per_trial=parsed.cpus_per_trial,
                          gpus_per_trial=parsed.gpus_per_trial)
        from dpsd.report.study import keep_study

        storage = keep_study(parsed.spec, scale, overrides, _archive(parsed))
        print(f"study {found['study']}: {found['trials']} trials finished, {len(found['best'])} best configurations "
              f"run again ({found['repeats']} runs); its page: dpsd pages (where results/pages.yaml lists it), or "
              f"dpsd report --study {parsed.spec}; its Optuna storage: optuna-dashboard {storage}")
        return 0
    summary = run_sweep(parsed.spec, scale, overrides, parsed.address, parsed.dry_run,
                        parsed.cpus_per_trial, parsed.gpus_per_trial, parsed.claim_timeout,
                        rerun_stale=parsed.rerun_stale, match=parsed.match, archive=_archive(parsed),
                        seeds=parsed.seeds)
    print(format_summary(summary, parsed.dry_run))
    return 1 if summary["failed"] else 0


def _report_parser(command: str, description: str, scale: str = "smoke", scales: str = "check | smoke | laptop | paper"
                   ) -> argparse.ArgumentParser:
    from dpsd.report.render import DEFAULT_OUT, DEFAULT_REFERENCE, DEFAULT_SPECS

    parser = _parser(command, description)
    parser.add_argument("--scale", default=scale, help=f"{scales} (default {scale}; scale=... works too)")
    parser.add_argument("--only", nargs="+", default=[], metavar="SPEC", help="spec names or files (default: all)")
    parser.add_argument("--specs", default=str(DEFAULT_SPECS), help="folder of sweep specs (default sweeps/)")
    parser.add_argument("--reference", default=str(DEFAULT_REFERENCE), help="the papers' numbers (CSV)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="where to render (default reports/)")
    return parser


def _add_archive_choice(parser: argparse.ArgumentParser) -> None:
    from dpsd.sweep.store import DEFAULT_ARCHIVE

    parser.add_argument("--no-archive", action="store_true",
                        help=f"read the MLflow store alone (default: also the runs archive {DEFAULT_ARCHIVE}, where it "
                             "exists, so a fresh checkout sees what it holds)")


def _archive(parsed: argparse.Namespace) -> Path | None:
    """The runs archive a command reads: ``--archive CSV``, else the default where it exists, else none
    (``--no-archive``)."""
    from dpsd.sweep.store import DEFAULT_ARCHIVE

    if parsed.no_archive:
        return None
    chosen = getattr(parsed, "archive", None)
    return Path(chosen) if chosen else DEFAULT_ARCHIVE


def _overrides_after_only(parsed: argparse.Namespace, option: str = "only") -> list[str]:
    """``--only a b key=value`` (or ``--page``): names have no "=", so the words with one after the option are
    overrides."""
    names = getattr(parsed, option)
    setattr(parsed, option, [name for name in names if "=" not in name])
    return [*parsed.overrides, *(name for name in names if "=" in name)]


def cmd_report(args: list[str]) -> None:
    from dpsd.report import render_report, spec_paths
    from dpsd.sweep.spec import split_scale

    parser = _report_parser("report", "render every spec's tables and figures from the runs")
    parser.add_argument("--markdown", metavar="PATH",
                        help="also write the table, ladder and query-budget sections as Markdown (e.g. results/ladder.md)")
    parser.add_argument("--archive", metavar="CSV",
                        help="a runs archive tracked in git (e.g. results/runs.csv): read beside the MLflow store, "
                             "then rewritten with every run the report read, so its numbers outlive the store "
                             "(without it the default archive is read, never written)")
    parser.add_argument("--title", help="the --markdown page's title (default: its one spec's title)")
    parser.add_argument("--datasets", metavar="A,B",
                        help="only the cells of these datasets, comma-separated (a page of the MNIST panels: mnist)")
    parser.add_argument("--readme", metavar="PATH",
                        help="splice the verdict table and the frontier figure into PATH between its "
                             "'<!-- verdict -->' and '<!-- /verdict -->' lines (README.md; needs the headline spec)")
    parser.add_argument("--study", metavar="SPEC", nargs="+",
                        help="render the page of each hyper-parameter study (dpsd sweep SPEC --search optuna) into "
                             "--out instead: importance, parallel coordinates, the best configuration; with several, "
                             "also sensitivity.md comparing them")
    _add_archive_choice(parser)
    parsed = parser.parse_intermixed_args(args)
    scale, overrides = split_scale(_overrides_after_only(parsed), parsed.scale)
    if parsed.study:
        from dpsd.report.study import render_study

        print("report: " + ", ".join(map(str, render_study(parsed.study, overrides, parsed.out, scale, _archive(parsed),
                                                           update_archive=bool(parsed.archive)))))
        return
    index = render_report(spec_paths(parsed.specs, parsed.only), scale, overrides, parsed.reference, parsed.out,
                          parsed.markdown, _archive(parsed), update_archive=bool(parsed.archive),
                          title=parsed.title, readme=parsed.readme,
                          datasets=parsed.datasets.split(",") if parsed.datasets else None)
    print(f"report: {index}")


def cmd_pages(args: list[str]) -> None:
    from dpsd.report.pages import DEFAULT_PAGES, load_pages, render_pages

    parser = _parser("pages", "render every committed page (results/*.md and README's verdict) from the runs")
    parser.add_argument("--manifest", default=str(DEFAULT_PAGES), help=f"the pages and their specs (default {DEFAULT_PAGES})")
    parser.add_argument("--page", nargs="+", default=[], metavar="PATH",
                        help="only these pages of the manifest (e.g. results/ladder.md); default: all, in its order")
    parsed = parser.parse_intermixed_args(args)
    overrides = _overrides_after_only(parsed, "page")
    pages = load_pages(Path(parsed.manifest))
    wanted = {Path(path) for path in parsed.page}
    unknown = sorted(wanted - {page.markdown for page in pages})
    if unknown:
        raise ConfigError(f"--page {unknown[0]} is not in {parsed.manifest}; its pages: "
                          + ", ".join(str(page.markdown) for page in pages))
    written = render_pages([page for page in pages if not wanted or page.markdown in wanted], overrides, every=pages)
    print(f"pages: {len(written)} written")


def cmd_reproduce(args: list[str]) -> int:
    from dpsd.reproduce import PAGES, reproduce
    from dpsd.sweep.spec import CHECK, SCALES, split_scale
    from dpsd.sweep.summary import format_summary

    parser = _report_parser("reproduce", "run the sweeps (whatever is missing), then render the report", scale=CHECK,
                            scales=f"{CHECK} (the pipeline check) | smoke | laptop | paper | {PAGES}")
    parser.add_argument("--dry-run", action="store_true", help="list each spec's cells to run, stale and done; run nothing")
    parser.add_argument("--rerun-stale", action="store_true",
                        help="also re-run cells recorded by other code versions (default: listed and marked STALE only)")
    parser.add_argument("--address", help="an existing Ray cluster (default: a local one)")
    _add_trial_resources(parser)
    _add_archive_choice(parser)
    parser.add_argument("--pages", default="results/pages.yaml", help="--scale pages: the pages manifest")
    parsed = parser.parse_intermixed_args(args)
    scale, overrides = split_scale(_overrides_after_only(parsed), parsed.scale, accepted=(*SCALES, PAGES))
    result = reproduce(scale, parsed.only, parsed.dry_run, overrides, parsed.specs, parsed.reference, parsed.out,
                       parsed.address, parsed.rerun_stale, parsed.cpus_per_trial, parsed.gpus_per_trial,
                       archive=_archive(parsed), pages=Path(parsed.pages))
    for summary in result["sweeps"]:
        print(format_summary(summary, parsed.dry_run))
    for name in result["on_demand"]:
        at = "smoke" if scale == CHECK else scale  # its own budget is at smoke; at check it would be a pipeline check
        print(f"sweep {name}: on demand (an experiment at its own budget), not run; run it with --scale {at} --only {name}")
    for name in result["checked_on_demand"]:
        print(f"sweep {name}: on demand, planned at --scale {CHECK} (a pipeline check of its cells, not its runs); "
              f"its own budget: --scale smoke --only {name}")
    for command in result["studies"]:
        print(f"sweep {command.split()[2]}: a hyper-parameter study, not run by reproduce; run it with `{command}`")
    for name in result["not_on_a_page"]:
        print(f"sweep {name}: on no page of {parsed.pages}, not run at --scale {PAGES}")
    for index in result["indexes"]:
        print(f"report: {index}")
    if result["estimate"] and parsed.dry_run:  # a run printed it before it started
        print(result["estimate"])
    return 1 if any(summary["failed"] for summary in result["sweeps"]) else 0


def cmd_sync(args: list[str]) -> None:
    from dpsd.tracking import sync_runs

    parser = argparse.ArgumentParser(prog="dpsd sync", description="copy fallback runs to their tracking server")
    parser.add_argument("fallback", nargs="?", default="results/fallback", help="the fallback store's folder")
    parser.add_argument("--to", help="the target tracking URI (default: the one each run was meant for)")
    parsed = parser.parse_args(args)
    synced = sync_runs(parsed.fallback, parsed.to)
    for local, uri, remote in synced.copied:
        print(f"{local} -> {remote} in {uri}")
    if synced.unended:
        print(f"left {len(synced.unended)} run(s) that have not ended (still running, or killed before they ended): "
              f"{' '.join(synced.unended)}; a later sync copies each once it has ended")
    print(f"synced {len(synced.copied)} run(s)")


def cmd_quickstart(args: list[str]) -> int:
    from dpsd.quickstart import format_rows, quickstart

    parser = _parser("quickstart", "every method on the embedded digits at one epsilon: one table, reports/index.html")
    parser.add_argument("--out", default=None, help="where to render the report (default reports/)")
    parser.add_argument("--json", metavar="PATH", help="also write every cell's row (all its metrics) as JSON")
    parsed = parser.parse_intermixed_args(args)
    start = time.perf_counter()
    result = quickstart(parsed.overrides, **({"out": Path(parsed.out)} if parsed.out else {}))
    print(format_rows(result["rows"]))
    print(f"report: {result['index']}  ({time.perf_counter() - start:.0f} s)")
    print("the papers' numbers beside ours: README.md's verdict table and its privacy-accuracy frontier "
          "(results/figures/headline_laptop_frontier.png), regenerated by `dpsd report --scale laptop --only headline`")
    if parsed.json:
        write_json(parsed.json, result["rows"])
    return 1 if result["sweep"]["failed"] else 0


def cmd_new(args: list[str]) -> None:
    from dpsd.scaffold import new_method

    parser = argparse.ArgumentParser(prog="dpsd new", description="scaffold a new method from one that runs")
    parser.add_argument("kind", choices=["method"])
    parser.add_argument("name", help="the new method's registered name (a lower-case identifier)")
    parser.add_argument("--from", dest="source", required=True, help="the registered method to copy (e.g. lp1st)")
    parsed = parser.parse_args(args)
    result = new_method(parsed.name, parsed.source)
    print("wrote:")
    print("\n".join(f"  {path}" for path in result["written"]))
    print("left to do:")
    print("\n".join(f"  [ ] {item}" for item in result["todo"]))


# dpsd checkpoint: a long run (checkpoint.every_steps=N) moved between machines, and looked at while it runs.
CHECKPOINTS, TEACHERS = "checkpoints", "teachers"
PEEK_LATENTS = 64  # the batch of latents a peek draws (a fixed seed) to see whether the generator's images differ
FROZEN_SPREAD = 1e-6  # a spread below it: every latent gives the same image (float32 rounding aside)
RUNNING_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")  # BatchNorm buffers, not weights


def _checkpoint_state(path: Path) -> dict[str, Any]:
    """A checkpoint file's contents (:mod:`dpsd.checkpoint`); a missing or foreign file is a one-line error."""
    import pickle

    import torch

    if not path.is_file():
        raise ConfigError(f"no checkpoint file {path} (a run with checkpoint.every_steps=N writes "
                          f"<checkpoint.dir>/<method>-<config hash>.pt)")
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)  # our own file
    except (pickle.UnpicklingError, RuntimeError, EOFError):
        state = None
    if not isinstance(state, dict) or "steps_done" not in state or "trainer" not in state:
        raise ConfigError(f"{path} is not a dpsd checkpoint (no steps_done and trainer state)")
    return state


def steps_done(path: Path) -> int:
    """The steps a checkpoint file had done (-1 where there is no file)."""
    return int(_checkpoint_state(path)["steps_done"]) if path.is_file() else -1


def _run_folders(overrides: list[str]) -> tuple[Path, Path]:
    """The checkpoint folder and the teacher cache of the runs ``overrides`` describe (``checkpoint.dir``,
    default ``<results_dir>/checkpoints``; ``<results_dir>/teachers``)."""
    from dpsd.config import compose, resolve_paths

    cfg = resolve_paths(compose(overrides))
    return Path(cfg.checkpoint.dir), Path(cfg.results_dir) / TEACHERS


def checkpoint_save(folder: Path, overrides: list[str], teachers: str = "*.pt") -> list[str]:
    """Copy every checkpoint of the runs ``overrides`` describe, and the cached teachers ``teachers`` names (a glob),
    into ``folder``; one line a file."""
    import shutil

    checkpoint_dir, teacher_dir = _run_folders(overrides)
    checkpoints = sorted(checkpoint_dir.glob("*.pt"))
    if not checkpoints:
        raise ConfigError(f"no checkpoint in {checkpoint_dir} (*.pt): a run writes one there with "
                          "checkpoint.every_steps=N; name the run's folders with results_dir=... or checkpoint.dir=...")
    cached = sorted(teacher_dir.glob(teachers))
    if not cached:
        raise ConfigError(f"no teacher in {teacher_dir} matches {teachers!r}: a checkpoint resumes only beside the "
                          "teacher it distils")
    lines = []
    for kind, files in ((CHECKPOINTS, checkpoints), (TEACHERS, cached)):
        (folder / kind).mkdir(parents=True, exist_ok=True)
        for source in files:
            shutil.copyfile(source, folder / kind / source.name)
            steps = f" (after step {steps_done(source)})" if kind == CHECKPOINTS else ""
            lines.append(f"saved {folder / kind / source.name}{steps}")
    return lines


def checkpoint_restore(folder: Path, overrides: list[str]) -> list[str]:
    """Copy what ``folder`` holds into the folders of the runs ``overrides`` describe: a checkpoint only where none
    is there for its run or one with fewer steps (a newer one is kept), a teacher only where the cache lacks it."""
    import shutil

    if not (folder / CHECKPOINTS).is_dir():
        raise ConfigError(f"no {folder / CHECKPOINTS}: nothing was saved there (dpsd checkpoint save {folder} first)")
    checkpoint_dir, teacher_dir = _run_folders(overrides)
    lines = []
    for source in sorted((folder / CHECKPOINTS).glob("*.pt")):
        target = checkpoint_dir / source.name
        saved, held = steps_done(source), steps_done(target)
        if saved > held:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            lines.append(f"restored {target} (after step {saved})")
        else:
            lines.append(f"kept {target} (after step {held}; saved: {saved})")
    for source in sorted((folder / TEACHERS).glob("*.pt")):
        target = teacher_dir / source.name
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            lines.append(f"restored {target}")
    return lines


def image_spread(generator: Any, latent_dim: int) -> float:
    """The generator's images' standard deviation across a batch of :data:`PEEK_LATENTS` latents, averaged over
    pixels, the generator in training mode as DAFL runs it (batch statistics): 0 where every latent gives one image."""
    import torch

    latents = torch.randn(PEEK_LATENTS, latent_dim, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        images = generator.train()(latents)
    return float(images.std(dim=0).mean())


def checkpoint_peek(path: Path, overrides: list[str]) -> str:
    """The student a checkpoint holds, on the test split of the run ``overrides`` describe, and where it holds a
    generator, its images' spread across latents (:func:`image_spread`; 0: the absorbing state in which DAFL's
    recipe freezes), as one line: a look at a run in progress, not a result."""
    import torch

    from dpsd.data import data_info, load_data
    from dpsd.models import build_classifier, generator_from_config
    from dpsd.teachers import evaluate_accuracy

    state = _checkpoint_state(path)
    cfg = compose_run(overrides)
    info = data_info(cfg)
    student = build_classifier(cfg.model.student.arch, info.channels, info.image_size, info.num_classes)
    networks = [("student", student, "model.student")]
    if "generator" in state["trainer"]:
        generator = generator_from_config(cfg.model.generator, info.channels, info.image_size, int(cfg.seed), info.space)
        networks.append(("generator", generator, "model/generator"))
    for name, network, setting in networks:
        try:
            network.load_state_dict(state["trainer"][name])
        except (KeyError, RuntimeError):
            raise ConfigError(f"{path}'s {name} does not fit this config's {setting}: give the run's own "
                              "overrides") from None
    accuracy = evaluate_accuracy(student, load_data(cfg).test, torch.device("cpu"))
    line = f"{path.name} after step {state['steps_done']}: student test accuracy {100 * accuracy:.2f}%"
    if len(networks) == 2:
        spread = image_spread(networks[1][1], int(cfg.model.generator.latent_dim))
        line += f"; generator images' spread across {PEEK_LATENTS} latents {spread:.3f}" + (
            " (every latent gives the same image: frozen)" if spread < FROZEN_SPREAD else "")
    return line + " (a look, not a result)"


def checkpoint_compare(older: Path, newer: Path) -> list[str]:
    """Per network two checkpoints of one run hold, the largest change of a weight between them, one line each
    (BatchNorm's running statistics are left out: they follow every batch even where no weight moves)."""
    states = [_checkpoint_state(path) for path in (older, newer)]
    if states[0]["trainer"].keys() != states[1]["trainer"].keys():
        raise ConfigError(f"{older} and {newer} hold different networks: two checkpoints of one run are compared")
    lines = [f"steps {states[0]['steps_done']} -> {states[1]['steps_done']}"]
    for network, before in states[0]["trainer"].items():
        if not network.endswith("_opt"):
            after = states[1]["trainer"][network]
            weights = [key for key in before if not key.endswith(RUNNING_STATISTICS)]
            moved = max((after[key].double() - before[key].double()).abs().max().item() for key in weights)
            same = sum(bool((before[key] == after[key]).all()) for key in weights)
            lines.append(f"{network}: {same} of {len(weights)} weight tensors unchanged, largest change {moved:.3e}")
    return lines


def cmd_checkpoint(args: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="dpsd checkpoint", description="move a checkpointed run (checkpoint.every_steps=N) to another machine, "
        "or look at one in progress")
    parser.add_argument("action", choices=["save", "restore", "peek", "compare"])
    parser.add_argument("path", type=Path, help="save, restore: the folder to copy to or from; peek, compare: a "
                                                  "checkpoint file")
    parser.add_argument("rest", nargs="*", help="save, restore, peek: the run's overrides (results_dir=..., "
                                                "checkpoint.dir=...); compare: the newer checkpoint file")
    parser.add_argument("--teachers", default="*.pt", metavar="GLOB", help="save: the cached teachers to copy, a glob under "
                                                            "<results_dir>/teachers (default: all)")
    parsed = parser.parse_intermixed_args(args)
    if parsed.action == "compare":
        if len(parsed.rest) != 1:
            raise ConfigError("compare takes two checkpoint files: OLDER NEWER")
        lines = checkpoint_compare(parsed.path, Path(parsed.rest[0]))
    elif parsed.action == "save":
        lines = checkpoint_save(parsed.path, parsed.rest, parsed.teachers)
    elif parsed.action == "restore":
        lines = checkpoint_restore(parsed.path, parsed.rest)
    else:
        lines = [checkpoint_peek(parsed.path, parsed.rest)]
    print("\n".join(lines))


COMMANDS = {"new": cmd_new, "run": cmd_run, "quickstart": cmd_quickstart, "teacher": cmd_teacher, "privacy-report": cmd_privacy_report,
            "audit": cmd_audit, "sweep": cmd_sweep, "report": cmd_report, "pages": cmd_pages, "reproduce": cmd_reproduce, "sync": cmd_sync,
            "checkpoint": cmd_checkpoint}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpsd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's overrides and options")
    args = parser.parse_args(argv)
    set_threads()  # the CPUs this process was given (a sweep's trials set their own share)
    try:
        status = COMMANDS[args.command](args.args)
    except ConfigError as err:
        print(f"dpsd {args.command}: error: {err}", file=sys.stderr)
        return 2
    except Fault as err:
        print(f"dpsd {args.command}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C: one line, no traceback; a checkpointed run says where it can resume
        print(f"dpsd {args.command}: interrupted; " + (str(stop) or "nothing recorded (a run with "
              "checkpoint.every_steps resumes from its last checkpoint when started again)"), file=sys.stderr)
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
