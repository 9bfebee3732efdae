"""A hyper-parameter study's page: which hyper-parameters matter (Optuna's fANOVA over three seeds of its forest, and
PED-ANOVA), a parallel-coordinates plot of every trial, accuracy over the two that matter most, and the best
configuration with its held-out accuracy mean ± sample std over seeds.

The trials are the recorded runs tagged ``study`` (:mod:`dpsd.sweep.study`). Importance and the choice of the best
configuration read ``selection_accuracy`` (the test split's selection half); the accuracy a reader is shown is
``held_out_accuracy`` (the other half), which no selection step has seen. Optuna's importance evaluators and
plots do the work: the trials are handed to an in-memory ``optuna.Study`` (``add_trial``) with the spec's ranges as
its distributions."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd

from dpsd.report.figures import PNG_METADATA
from dpsd.report.tables import DASH, fmt_mean_std, markdown_table
from dpsd.sweep.study import HELD_OUT, SELECTION, search_block
from dpsd.sweep.spec import Spec

IMPORTANCE_SEEDS = (0, 1, 2)  # fANOVA fits a random forest: its importances are reported over these seeds


def study_runs(client, experiment_ids: list[str], name: str) -> pd.DataFrame:
    """One row per finished trial of study ``name``: run id, phase, sampled values (JSON), seed, both halves'
    accuracy (percent)."""
    runs = client.search_runs(experiment_ids, f"tags.study = '{name}' and attributes.status = 'FINISHED'",
                              max_results=5000)
    rows = [{"run_id": r.info.run_id, "phase": r.data.tags.get("study_phase", "search"),
             "params": r.data.tags.get("study_params", "{}"), "seed": int(float(r.data.params.get("seed", 0))),
             SELECTION: 100 * r.data.metrics[SELECTION], HELD_OUT: 100 * r.data.metrics[HELD_OUT]}
            for r in runs if SELECTION in r.data.metrics and HELD_OUT in r.data.metrics]
    return pd.DataFrame(rows, columns=["run_id", "phase", "params", "seed", SELECTION, HELD_OUT])


def optuna_study(spec: Spec, runs: pd.DataFrame):
    """The search trials as an in-memory Optuna study (maximising selection accuracy) over the spec's ranges."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    def distribution(kind: str, args: list):
        return {"loguniform": lambda: FloatDistribution(args[0], args[1], log=True),
                "uniform": lambda: FloatDistribution(args[0], args[1]),
                "int": lambda: IntDistribution(args[0], args[1]),
                "choice": lambda: CategoricalDistribution(args)}[kind]()

    space = {key: distribution(kind, args) for key, (kind, args) in search_block(spec).items()}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for _, row in runs[runs["phase"] == "search"].iterrows():
        study.add_trial(optuna.trial.create_trial(params=json.loads(row["params"]), distributions=space,
                                                  value=row[SELECTION]))
    return study


def importance_table(study) -> pd.DataFrame:
    """Per hyper-parameter: fANOVA importance mean ± sample std over :data:`IMPORTANCE_SEEDS`, and PED-ANOVA's;
    most important first."""
    from optuna.importance import FanovaImportanceEvaluator, PedAnovaImportanceEvaluator, get_param_importances

    fanova = [get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=s)) for s in IMPORTANCE_SEEDS]
    ped = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator())
    rows = []
    for key in fanova[0]:
        values = [f[key] for f in fanova]
        rows.append({"Hyper-parameter": key,
                     "fANOVA (mean ± std, 3 forest seeds)": f"{statistics.fmean(values):.3f} ± {statistics.stdev(values):.3f}",
                     "PED-ANOVA": f"{ped.get(key, 0.0):.3f}", "_mean": statistics.fmean(values)})
    return pd.DataFrame(rows).sort_values("_mean", ascending=False).reset_index(drop=True)


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


def study_figures(study, importance: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    """The parallel-coordinates plot of the search, and the selection accuracy over the two most important
    hyper-parameters (Optuna's matplotlib plots), as PNGs in ``folder``."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.exceptions import ExperimentalWarning
    from optuna.visualization import matplotlib as plots

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    with warnings.catch_warnings(), matplotlib.rc_context():  # Optuna's plots set the ggplot style: kept to them
        warnings.simplefilter("ignore", ExperimentalWarning)
        drawn = [("parallel", plots.plot_parallel_coordinate(study, target_name="selection accuracy (%)"))]
        if len(importance) >= 2:
            pair = list(importance["Hyper-parameter"][:2])
            drawn.append(("pair", plots.plot_contour(study, params=pair, target_name="selection accuracy (%)")))
    for kind, axes in drawn:
        figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
        path = folder / f"study_{name}_{kind}.png"
        figure.savefig(path, dpi=110, bbox_inches="tight", metadata=PNG_METADATA)
        plt.close(figure)
        out.append(path)
    return out


def study_markdown(spec: Spec, runs: pd.DataFrame, out: Path) -> str:
    """The study's page (figures written under ``out/figures``)."""
    search = runs[runs["phase"] == "search"]
    lines = [f"# Study: {spec.name}", "",
             f"{len(search)} search trials (Optuna's TPE through Ray Tune), {len(runs) - len(search)} repeats of the "
             "best configurations at other seeds. Ranges: "
             + "; ".join(f"`{k}` {kind} {args}" for k, (kind, args) in search_block(spec).items()) + ".",
             "", "Importance and the best configuration are read on the test split's selection half; the accuracy "
             "shown for the best configuration is the held-out half's, which no selection step saw.", ""]
    if len(search) < 2:
        return "\n".join(lines + ["Too few finished trials for an importance analysis.", ""])
    study = optuna_study(spec, runs)
    importance = importance_table(study)
    lines += ["## Which hyper-parameters matter", "", markdown_table(importance.drop(columns="_mean")), ""]
    for path in study_figures(study, importance, out / "figures", spec.name):
        lines += [f"![{path.stem}](figures/{path.name})", ""]
    best = best_configuration(runs)
    if best is not None:
        lines += ["## Best configuration", "",
                  ", ".join(f"`{k}={v:.4g}`" if isinstance(v, float) else f"`{k}={v}`" for k, v in best["params"].items())
                  + f": held-out accuracy {best['held_out']}% (n = {best['n']}, seeds {best['seeds']}; runs "
                  + ", ".join(best["runs"]) + ").", ""]
    return "\n".join(lines)


def sensitivity_markdown(studies: list[tuple[Spec, pd.DataFrame]]) -> str:
    """The page that compares studies: per study (its method), its hyper-parameters from most to least important
    (fANOVA's mean over three forest seeds), and its trials."""
    rows = []
    for spec, runs in studies:
        search = runs[runs["phase"] == "search"]
        ranked = importance_table(optuna_study(spec, runs)) if len(search) >= 2 else pd.DataFrame()
        method = next((o.partition("=")[2] for o in spec.base if o.startswith("method=")), DASH)
        rows.append({"Study": f"[{spec.name}](study_{spec.name}.md)", "Method": method, "Trials": len(search),
                     "Most to least important (fANOVA)": "; ".join(
                         f"{r['Hyper-parameter']} {r['_mean']:.2f}" for _, r in ranked.iterrows()) or DASH})
    return "\n".join(["# Which hyper-parameters matter, method by method", "",
                      "Each row is a study (`dpsd sweep SPEC --search optuna`; its page has the plots and the best "
                      "configuration): its hyper-parameters ranked by Optuna's fANOVA importance of the selection "
                      "accuracy, the mean over three forest seeds (the importances of a study sum to 1).", "",
                      markdown_table(pd.DataFrame(rows)), ""])


def render_study(spec_paths: list[str], overrides: list[str], out: str | Path) -> list[Path]:
    """Write ``out/study_<name>.md`` (and its figures) for each study from its runs in the store the ``overrides``
    name (``results_dir``, ``tracking``), and for several ``out/sensitivity.md`` comparing them; returns the pages."""
    from dpsd.config import compose, resolve_paths
    from dpsd.sweep.spec import load_spec
    from dpsd.sweep.store import client_for

    client, experiment_id = client_for(resolve_paths(compose(list(overrides))))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pages, studies = [], []
    for spec in map(load_spec, spec_paths):
        runs = study_runs(client, [experiment_id], spec.name)
        page = out / f"study_{spec.name}.md"
        page.write_text(study_markdown(spec, runs, out) + "\n")
        pages.append(page)
        studies.append((spec, runs))
    if len(studies) > 1:
        pages.append(out / "sensitivity.md")
        pages[-1].write_text(sensitivity_markdown(studies))
    return pages
