"""A hyper-parameter study's page: which hyper-parameters matter (Optuna's fANOVA over three seeds of its forest, and
PED-ANOVA), the search's history, a slice per hyper-parameter, a parallel-coordinates plot of every trial, accuracy
over the two that matter most (:mod:`dpsd.report.study_figures`), the accuracy across each parameter's range
(:mod:`dpsd.report.parameter_ranges`), and the best configuration with its held-out accuracy mean ± sample std over
seeds. A study with two objectives (accuracy and eps rigorous: :mod:`dpsd.sweep.objectives`) gets the trade-off's
page instead (:mod:`dpsd.report.pareto`).

The trials are the recorded runs tagged ``study`` (:mod:`dpsd.sweep.study`), read as every page reads its runs: the
MLflow store merged with the runs archive (:func:`dpsd.report.runs.load_history`; ``results/runs.csv`` keeps each
trial's phase, sampled values, seed and both halves' accuracy, :data:`dpsd.report.runs.STUDY_COLUMNS`), so a fresh
checkout, with the archive alone, renders the page the store rendered. A trial whose configuration ran twice counts
once, its latest run (the archive's rule for a cell); a page shows one scale's trials. Importance and the choice of
the best configuration read ``selection_accuracy`` (the test split's selection half); the accuracy a reader is shown
is ``held_out_accuracy`` (the other half), which no selection step has seen. Optuna's importance evaluators and
plots do the work: the trials are handed to an in-memory ``optuna.Study`` (``add_trial``) with the spec's ranges as
its distributions. A study with no trial yet renders a page that says so and names the command that runs it.

``dpsd pages`` renders the committed pages (``results/pages.yaml``: a page of one study spec is its page, a page of
several is the cross-method ``sensitivity`` page) through :func:`render_study_page`; ``dpsd report --study`` writes
the same pages into ``--out`` (:func:`render_study`)."""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Sequence

import pandas as pd

from dpsd.report.parameter_ranges import range_lines, shared_lines
from dpsd.report.runs import latest_per_cell, load_history, read_archive, store_words, write_archive
from dpsd.report.study_figures import study_figures
from dpsd.report.tables import DASH, fmt_eps, fmt_mean_std, fmt_number, markdown_table, page_scale_line
from dpsd.sweep.objectives import PRIVACY, is_multi_objective, study_directions
from dpsd.sweep.study import HELD_OUT, SELECTION, search_block, study_budget
from dpsd.sweep.spec import Spec, base_value, composed

IMPORTANCE_SEEDS = (0, 1, 2)  # fANOVA fits a random forest: its importances are reported over these seeds


RUN_FIELDS = ["run_id", "phase", "params", "seed", SELECTION, HELD_OUT, *PRIVACY, "source"]
STORE, ARCHIVE = "store", "archive"  # where a trial was read: this MLflow store alone (the user's), or the runs archive


def study_runs(history: pd.DataFrame, name: str, scale: str | None = None) -> pd.DataFrame:
    """One row per finished trial of study ``name`` (at ``scale``, if given) among ``history``'s runs
    (:func:`dpsd.report.runs.load_history`: the store's and the archive's), oldest first: run id, phase, sampled values
    (JSON), seed, both halves' accuracy (percent), both ledgers' eps, where it was read (``source``, :func:`study_history`; a history
    without it: :data:`STORE`). A configuration run twice counts once: its latest run."""
    if history.empty or "study" not in history.columns:
        return pd.DataFrame(columns=RUN_FIELDS)
    rows = history[(history["study"] == name) & (history["status"] == "FINISHED") & (history["cell_status"] == "done")]
    if scale is not None:
        rows = rows[rows["scale"] == scale]
    halves = [f"metrics.{SELECTION}", f"metrics.{HELD_OUT}"]
    if rows.empty or not set(halves) <= set(rows.columns):
        return pd.DataFrame(columns=RUN_FIELDS)
    rows = latest_per_cell(rows).reset_index()
    rows = rows[rows[halves].notna().all(axis=1)].sort_values(["start_time", "run_id"])
    return pd.DataFrame({"run_id": rows["run_id"], "phase": rows["study_phase"], "params": rows["study_params"],
                         "seed": rows["study_seed"].astype(float).astype(int),
                         SELECTION: 100 * rows[halves[0]].astype(float), HELD_OUT: 100 * rows[halves[1]].astype(float),
                         **{eps: rows[eps].astype(float) for eps in PRIVACY},
                         "source": rows["source"] if "source" in rows.columns else STORE},
                        columns=RUN_FIELDS).reset_index(drop=True)


def optuna_study(spec: Spec, runs: pd.DataFrame, phase: str = "search", storage=None, name: str | None = None):
    """The trials of ``phase`` as an Optuna study over the spec's ranges, in memory or in ``storage`` as study
    ``name``, with the spec's objectives (:func:`dpsd.sweep.objectives.study_directions`: the selection accuracy
    maximised, and where the spec names one a ledger's eps minimised); each trial keeps its run id, seed, held-out
    accuracy and both ledgers' eps as user attributes."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    def distribution(kind: str, args: list):
        return {"loguniform": lambda: FloatDistribution(args[0], args[1], log=True),
                "uniform": lambda: FloatDistribution(args[0], args[1]),
                "int": lambda: IntDistribution(args[0], args[1]),
                "choice": lambda: CategoricalDistribution(args)}[kind]()

    space = {key: distribution(kind, args) for key, (kind, args) in search_block(spec).items()}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    directions = study_directions(spec.name, spec.directions)
    study = optuna.create_study(directions=[direction for _, direction in directions], storage=storage,
                                study_name=name)
    for _, row in runs[runs["phase"] == phase].iterrows():
        study.add_trial(optuna.trial.create_trial(
            params=json.loads(row["params"]), distributions=space, values=[row[objective] for objective, _ in directions],
            user_attrs={"run_id": row["run_id"], "seed": int(row["seed"]), HELD_OUT: float(row[HELD_OUT]),
                        **{eps: float(row[eps]) for eps in PRIVACY}}))
    return study


def journal(path: Path):
    """Optuna's JournalStorage in the file ``path`` (JSON lines: text, kept in git; ``optuna-dashboard PATH`` and
    ``optuna.load_study(study_name=..., storage=journal(path))`` open it)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(path)))


def save_storage(spec: Spec, runs: pd.DataFrame, path: Path) -> bool:
    """Keep the study's trials (:func:`study_runs`) where Optuna's own tools open them: the journal at ``path`` holds
    the search as study ``<spec name>`` and the repeats as ``<spec name>:repeats`` (:func:`optuna_study`). Its lines
    carry a random worker id, so it is written afresh only when the runs it holds differ from ``runs``: rendering the
    same runs again leaves the file, and git, untouched. Returns whether it was written."""
    import optuna

    names = {"search": spec.name, "repeat": f"{spec.name}:repeats"}
    if path.exists():
        storage = journal(path)
        held = {trial.user_attrs.get("run_id") for summary in optuna.get_all_study_summaries(storage)
                for trial in optuna.load_study(study_name=summary.study_name, storage=storage).trials}
        if held == set(runs["run_id"]):
            return False
        path.unlink()
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = journal(path)
    for phase, name in names.items():
        if (runs["phase"] == phase).any():
            optuna_study(spec, runs, phase, storage, name)
    return True


FLAT = "too flat to rank"
"""What a page says of a study whose trials fANOVA cannot tell apart (every one at one accuracy: no variance to
apportion)."""


def importance_table(study) -> pd.DataFrame | None:
    """Per hyper-parameter: fANOVA importance mean ± sample std over :data:`IMPORTANCE_SEEDS`, and PED-ANOVA's;
    most important first. None where the study is :data:`FLAT` (fANOVA finds zero total variance)."""
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances

    try:
        fanova = [get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=s)) for s in IMPORTANCE_SEEDS]
    except RuntimeError as err:
        if "zero total variance" not in str(err):
            raise
        return None
    ped = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    rows = []
    for key in fanova[0]:
        values = [f[key] for f in fanova]
        rows.append({"Hyper-parameter": key,
                     "fANOVA (mean ± std, 3 forest seeds)": f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}",
                     "PED-ANOVA": f"{ped.get(key, 0.0):.3f}", "_mean": statistics.fmean(values)})
    return pd.DataFrame(rows).sort_values("_mean", ascending=False).reset_index(drop=True)


def first_by_each(importance: pd.DataFrame) -> tuple[str, str]:
    """The hyper-parameter each evaluator of :func:`importance_table` ranks first: (fANOVA's, PED-ANOVA's)."""
    ped = importance["PED-ANOVA"].astype(float)
    return importance["Hyper-parameter"].iloc[0], importance["Hyper-parameter"][ped.idxmax()]


def agreement_sentence(importance: pd.DataFrame, trials: int) -> str:
    """Whether fANOVA and PED-ANOVA name the same hyper-parameter first: where they do not, the order is read from
    too few trials (``trials``) to be more than a hint, and the page says so."""
    fanova, ped = first_by_each(importance)
    if fanova == ped:
        return f"fANOVA and PED-ANOVA both rank `{fanova}` first ({trials} trials)."
    return (f"fANOVA ranks `{fanova}` first and PED-ANOVA `{ped}`: the two evaluators disagree over {trials} "
            f"trials, so the order is a hint, not a finding (more trials, `--trials`, to read it).")


def best_configuration(runs: pd.DataFrame) -> dict | None:
    """The configuration with the best mean selection accuracy among those run at more than one seed (else among
    all), with its held-out accuracy over its seeds."""
    groups = runs.groupby("params")
    repeated = [p for p, at in groups if len(at) > 1] or list(groups.groups)
    if not repeated:
        return None
    params = max(repeated, key=lambda p: groups.get_group(p)[SELECTION].mean())
    at = groups.get_group(params).sort_values("seed")
    held_out = at[HELD_OUT]
    return {"params": json.loads(params), "held_out": fmt_mean_std(held_out.mean(), held_out.std(ddof=1)), "n": len(at),
            "seeds": list(at["seed"]), "runs": list(at["run_id"])}


def format_value(value) -> str:
    """A sampled value as a page shows it: a float to four significant digits, anything else as it is."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trials_table(runs: pd.DataFrame) -> str:
    """Every trial, oldest first: its phase and seed, its sampled values, both halves' accuracy, both ledgers' eps,
    its run id and where it was read (:func:`sources_sentence`)."""
    params = [json.loads(text) for text in runs["params"]]
    keys = list(dict.fromkeys(key for values in params for key in values))
    body = pd.DataFrame({"#": range(1, len(runs) + 1), "Phase": runs["phase"], "Seed": runs["seed"],
                         **{f"`{key}`": [format_value(values.get(key, DASH)) for values in params] for key in keys},
                         "Selection (%)": runs[SELECTION].map(fmt_number),
                         "Held-out (%)": runs[HELD_OUT].map(fmt_number),
                         "ε claimed": runs["eps_claimed"].map(fmt_eps),
                         "ε rigorous": runs["eps_rigorous"].map(fmt_eps), "Run": runs["run_id"],
                         "Source": runs["source"]})
    return markdown_table(body.astype(str))


CHANCE_MARGIN = 1.0
"""Percentage points from chance (100 / classes) within which a trial's selection accuracy counts as at chance."""


def chance_sentence(spec: Spec, runs: pd.DataFrame) -> str:
    """How many trials score at chance (:data:`CHANCE_MARGIN`) on the selection half, said plainly: a study most of
    whose trials sit there ranks noise."""
    from dpsd.data import data_info

    classes = data_info(composed(list(spec.base))).num_classes
    chance = 100 / classes
    at = int(((runs[SELECTION] - chance).abs() <= CHANCE_MARGIN).sum())
    where = f"within {CHANCE_MARGIN:g} point of chance ({chance:.2f}%, {classes} classes) on the selection half"
    if not at:
        return f"No trial scores {where}."
    return (f"{at} of the {len(runs)} trials ({100 * at / len(runs):.0f}%) score {where}: their students do no "
            "better than a guess.")


def sources_sentence(runs: pd.DataFrame) -> str:
    """Whose trials a page reads (:func:`study_history`'s ``source``): the runs archive's, this store's alone (the
    user's own runs, not archived), or both, counted, read as one study."""
    counts = runs["source"].value_counts()
    store, archived = int(counts.get(STORE, 0)), int(counts.get(ARCHIVE, 0))
    if not store:
        return f"All {archived} trials are read from the runs archive; none is this store's alone."
    if not archived:
        return f"All {store} trials are this store's (runs not in the runs archive); none is the archive's."
    return (f"{store} trials are this store's alone (runs not in the runs archive: yours) and {archived} the "
            "archive's, read as one study; the table of trials says which is which.")


def study_command(spec: Spec, scale: str = "smoke") -> str:
    """The command that runs ``spec``'s study at ``scale`` at its own budget (:func:`dpsd.sweep.study.study_budget`)."""
    trials, best = study_budget(spec)
    return " ".join(["dpsd sweep", spec.name, "--search optuna", f"--trials {trials}", f"--best {best}",
                     *([f"scale={scale}"] if scale != "smoke" else [])])


GENERATED = "Generated by `dpsd pages` (the study report, dpsd/report/study.py) from the tracked runs; do not edit."


def _head(title: str, intro: Sequence[str]) -> list[str]:
    """A page's title and intro lines (a committed page's: :data:`GENERATED`, then each a Markdown line break)."""
    generated = [GENERATED, ""] if intro else []
    return [f"# {title}", "", *generated, *([*(f"{line}  " for line in intro), ""] if intro else [])]


def study_markdown(spec: Spec, runs: pd.DataFrame, out: Path, scale: str = "smoke", title: str | None = None,
                   intro: Sequence[str] = (), history: pd.DataFrame | None = None,
                   overrides: Sequence[str] = ()) -> str:
    """The study's page (figures written under ``out/figures``, named for the spec and ``scale``), headed ``title``
    (default: ``Study: <name>``) and the ``intro`` lines; a study with two objectives gets the trade-off's page
    (:func:`dpsd.report.pareto.pareto_lines`, beside the frontier page's points read from ``history``, the store
    ``overrides`` name and the archive)."""
    from dpsd.report.pages import DEFAULT_PAGES
    from dpsd.report.pareto import pareto_lines
    from dpsd.report.render import DEFAULT_SPECS, artifact_stem

    search = runs[runs["phase"] == "search"]
    ranges = "; ".join(f"`{k}` {kind} {args}" for k, (kind, args) in search_block(spec).items())
    lines = _head(title or f"Study: {spec.name}", intro)
    if runs.empty:
        return "\n".join(lines + [f"Not run yet: run `{study_command(spec, scale)}`, then `dpsd pages` (or `dpsd "
                                  f"report --study {spec.name}`) renders this page from its runs. Ranges: {ranges}.",
                                  ""])
    multi = is_multi_objective(study_directions(spec.name, spec.directions))
    lines += [f"{len(search)} search trials (Optuna's {'multi-objective ' if multi else ''}TPE through Ray Tune), "
              f"{len(runs) - len(search)} repeats of the {'Pareto front' if multi else 'best'} configurations at "
              f"other seeds. Ranges: {ranges}.", "", sources_sentence(runs), "", chance_sentence(spec, runs), ""]
    if multi:
        return "\n".join(lines + pareto_lines(spec, runs, pd.DataFrame() if history is None else history, out,
                                              artifact_stem(spec, scale), scale, DEFAULT_PAGES, DEFAULT_SPECS,
                                              overrides)
                         + ["## Every trial", "", trials_table(runs), ""])
    lines += ["Importance and the best configuration are read on the test split's selection half; the accuracy "
              "shown for the best configuration is the held-out half's, which no selection step saw.", ""]
    if len(search) < 2:
        return "\n".join(lines + ["Too few finished trials for an importance analysis.", ""])
    study = optuna_study(spec, runs)
    importance = importance_table(study)
    lines += ["## Which hyper-parameters matter", ""]
    if importance is None:
        lines += [f"The study is {FLAT}: its {len(search)} search trials' selection accuracies leave fANOVA no "
                  "variance to apportion, so no hyper-parameter is shown to matter more than another.", ""]
    else:
        lines += [markdown_table(importance.drop(columns="_mean")), "", agreement_sentence(importance, len(search)),
                  ""]
    pair = [] if importance is None else list(importance["Hyper-parameter"][:2])
    figures = study_figures(study, pair, out / "figures", artifact_stem(spec, scale), flat=importance is None)
    lines += ["The search's optimisation history, a slice per hyper-parameter"
              + (" (the study is flat: its contour and parallel coordinates would colour one value, and are left "
                 "out)" if importance is None else ", the parallel coordinates of every trial and the contour over "
                 "the two that matter most") + " (Optuna's own plots of the study in its journal):", ""]
    lines += [f"![{path.stem}](figures/{path.name})" for path in figures] + [""]
    lines += ["## Accuracy across each parameter's range", "", *range_lines(spec, runs)]
    best = best_configuration(runs)
    if best is not None:
        lines += ["## Best configuration", "",
                  ", ".join(f"`{k}={format_value(v)}`" for k, v in best["params"].items())
                  + f": held-out accuracy {best['held_out']}% (n = {best['n']}, seeds {best['seeds']}; runs "
                  + ", ".join(best["runs"]) + ").", ""]
    lines += ["## Every trial", "", trials_table(runs), ""]
    return "\n".join(lines)


def sensitivity_markdown(studies: list[tuple[Spec, pd.DataFrame]], links: dict[str, str] | None = None,
                         title: str | None = None, intro: Sequence[str] = (), scale: str = "smoke",
                         out: Path | None = None, stem: str = "sensitivity") -> str:
    """The page that compares studies: per study (its method), its hyper-parameters from most to least important
    (fANOVA's mean over three forest seeds), and its trials; a study with none says how to run it; then the studies
    on the parameters they share, normalised (:func:`dpsd.report.parameter_ranges.shared_lines`; its figure
    ``<stem>_<scale>_shared.png`` under ``out/figures`` where ``out`` is given). ``links``: each study's page by
    name, relative to this one, a study without one named unlinked (default: each ``study_<name>.md``)."""
    rows = []
    for spec, runs in studies:
        search = runs[runs["phase"] == "search"]
        ranked = importance_table(optuna_study(spec, runs)) if len(search) >= 2 else pd.DataFrame()
        flat = ranked is None
        ranked = pd.DataFrame() if flat else ranked
        method = base_value(spec, "method", DASH)
        link = f"study_{spec.name}.md" if links is None else links.get(spec.name)
        order = "; ".join(f"{r['Hyper-parameter']} {r['_mean']:.2f}" for _, r in ranked.iterrows())
        rows.append({"Study": f"[{spec.name}]({link})" if link else spec.name, "Method": method, "Trials": len(search),
                     "Most to least important (fANOVA)": order or (FLAT if flat else
                         f"not run yet: `{study_command(spec, scale)}`" if runs.empty else DASH),
                     "First by PED-ANOVA": first_by_each(ranked)[1] if len(ranked) else DASH})
    return "\n".join([*_head(title or "Which hyper-parameters matter, method by method", intro),
                      "Each row is a study (`dpsd sweep SPEC --search optuna`; its page has the plots and the best "
                      "configuration): its hyper-parameters ranked by Optuna's fANOVA importance of the selection "
                      "accuracy, the mean over three forest seeds (the importances of a study sum to 1); where "
                      "PED-ANOVA ranks another first, the order is a hint from too few trials, not a finding.", "",
                      markdown_table(pd.DataFrame(rows)), "", "## On a shared parameter space", "",
                      *shared_lines(studies, None if out is None else Path(out) / "figures", f"{stem}_{scale}")])


def study_history(overrides: Sequence[str], archive: Path | None = None,
                  update_archive: bool = False) -> tuple[pd.DataFrame, list[str]]:
    """Every completed run of the store ``overrides`` name (``results_dir``, ``tracking``) and of ``archive`` (where
    it exists), the archive rewritten with them (``update_archive``), as a page reads them, each with its ``source``
    (:data:`ARCHIVE` where the archive holds it, else :data:`STORE`: a run of this store alone, the user's own); and
    the page's lines naming where they were read (the store first)."""
    from dpsd.config import resolve_paths
    from dpsd.tracking import tracking_uri

    given = composed(list(overrides))
    cfg = resolve_paths(given)
    uri = tracking_uri(cfg)
    archive = Path(archive) if archive is not None else None
    history = load_history(uri, str(cfg.tracking.experiment), archive if archive and archive.exists() else None)
    if archive is not None and update_archive:
        write_archive(history, archive, None, Path(cfg.results_dir))
    archived = set(read_archive(archive)["run_id"]) if archive is not None and archive.exists() else set()
    if len(history):
        history = history.assign(source=history["run_id"].map(lambda run: ARCHIVE if run in archived else STORE))
    store = store_words(uri, Path(cfg.results_dir), str(given.results_dir))
    read = [f"Reproduced numbers: MLflow runs in {store} (experiment {cfg.tracking.experiment!r}). No number on this "
            "page is typed by hand."]
    if archive is not None and archive.exists():
        read.append(f"Runs archived in {archive} (read beside the store"
                    + (", then rewritten with the merged runs)." if update_archive else ")."))
    return history, read


def _warn_unrun(spec: Spec, scale: str) -> None:
    print(f"warning: study {spec.name}: no finished trial at scale {scale} in the store or the archive; run it with "
          f"`{study_command(spec, scale)}`", file=sys.stderr)


def storage_path(folder: Path, spec: Spec, scale: str) -> Path:
    """Where a study's trials at ``scale`` are kept for Optuna's tools (:func:`save_storage`): ``folder/optuna/``."""
    from dpsd.report.render import artifact_stem

    return Path(folder) / "optuna" / f"{artifact_stem(spec, scale)}.log"


def storage_line(spec: Spec, runs: pd.DataFrame, folder: Path, scale: str) -> str:
    """Keep the study's trials in its journal under ``folder`` (:func:`save_storage`), and the page's line naming it
    and the commands that open it."""
    path = storage_path(folder, spec, scale)
    save_storage(spec, runs, path)
    shown = Path(os.path.relpath(path)).as_posix() if not Path(folder).is_absolute() else path.as_posix()
    return (f"Optuna storage: `{shown}` (a journal; `optuna-dashboard {shown}`, or `optuna.load_study(study_name="
            f"\"{spec.name}\", storage=JournalStorage(JournalFileBackend(\"{shown}\")))`; the repeats are study "
            f"`{spec.name}:repeats`).")


def keep_study(spec_path: str, scale: str, overrides: Sequence[str], archive: Path | None = None) -> Path:
    """After a search (``dpsd sweep --search``): its trials, from the store ``overrides`` name and ``archive``, kept
    in the journal under ``<results_dir>/optuna/`` (:func:`save_storage`); returns its path."""
    from dpsd.config import resolve_paths
    from dpsd.sweep.spec import load_spec

    spec = load_spec(spec_path)
    history, _ = study_history(overrides, archive)
    path = storage_path(Path(resolve_paths(composed(list(overrides))).results_dir), spec, scale)
    save_storage(spec, study_runs(history, spec.name, scale), path)
    return path


def render_study_page(specs: Sequence[Path], scale: str, overrides: Sequence[str], markdown: Path,
                      archive: Path | None = None, update_archive: bool = False, title: str | None = None,
                      links: dict[str, Path] | None = None) -> Path:
    """A committed page (``dpsd pages``): the page of the one study in ``specs``, or of several the ``sensitivity``
    page (the trade-offs page where every one is a trade-off study: :func:`dpsd.report.pareto.trade_offs_lines`), at
    ``markdown`` (figures under its folder's ``figures/``), from the runs at ``scale`` in the store and
    ``archive`` (rewritten with them: ``update_archive``). ``links``: each study's page by spec name, for the
    sensitivity page's links (a study without one is named unlinked)."""
    from dpsd.sweep.spec import load_spec

    markdown = Path(markdown)
    loaded = [load_spec(path) for path in specs]
    history, read = study_history(overrides, archive, update_archive)
    intro = [f"Scale: {scale} — {page_scale_line(loaded, scale)}.", *read]
    studies = [(spec, study_runs(history, spec.name, scale)) for spec in loaded]
    for spec, runs in studies:
        if runs.empty:
            _warn_unrun(spec, scale)
    if len(studies) == 1:
        spec, runs = studies[0]
        if not runs.empty:
            intro.append(storage_line(spec, runs, markdown.parent, scale))
        text = study_markdown(spec, runs, markdown.parent, scale, title or str(spec.feeds.get("title", spec.name)),
                              intro, history, overrides)
    else:
        relative = {name: Path(os.path.relpath(Path(path), markdown.parent)).as_posix()
                    for name, path in (links or {}).items()}  # where the page links them from
        if all(is_multi_objective(study_directions(spec.name, spec.directions)) for spec in loaded):
            from dpsd.report.pareto import trade_offs_lines

            text = "\n".join([*_head(title or "Every method's privacy–accuracy trade-off", intro),
                              *trade_offs_lines(studies, relative, scale, markdown.parent, markdown.stem)])
        else:
            text = sensitivity_markdown(studies, relative, title, intro, scale, markdown.parent, markdown.stem)
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(text.rstrip() + "\n", encoding="utf-8")
    return markdown


def render_study(spec_paths: list[str], overrides: list[str], out: str | Path, scale: str = "smoke",
                 archive: Path | None = None, update_archive: bool = False) -> list[Path]:
    """Write ``out/study_<name>.md`` (and its figures) for each study from its runs at ``scale`` in the store the
    ``overrides`` name (``results_dir``, ``tracking``) and in ``archive`` (rewritten with them: ``update_archive``),
    and for several ``out/sensitivity.md`` comparing them; returns the pages."""
    from dpsd.sweep.spec import load_spec

    history, _ = study_history(overrides, archive, update_archive)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pages, studies = [], []
    for spec in map(load_spec, spec_paths):
        runs = study_runs(history, spec.name, scale)
        if runs.empty:
            _warn_unrun(spec, scale)
        page = out / f"study_{spec.name}.md"
        intro = [storage_line(spec, runs, out, scale)] if not runs.empty else []
        page.write_text(study_markdown(spec, runs, out, scale, intro=intro, history=history, overrides=overrides)
                        + "\n")
        pages.append(page)
        studies.append((spec, runs))
    if len(studies) > 1:
        pages.append(out / "sensitivity.md")
        pages[-1].write_text(sensitivity_markdown(studies, scale=scale, out=out))
    return pages
