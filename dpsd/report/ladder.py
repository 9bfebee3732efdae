"""The ladder and the query-budget axis (DESIGN.md "The ladder"), from a spec's cell groups.

A run's rung is read from its resolved config, never from a label typed in a spec: R0 ``method=teacher``,
R1 ``method=kd_data``, R2 ``model/generator=gaussian_noise`` (no mechanism), R3 ``privacy=none``, R4
``privacy.noiseless=true``, R5 the mechanism with its noise. A ladder is one seed method in one privacy
mode (RRWithPrior is a ladder of its own); the shared rungs join every ladder: R0 and R1 (the same
teacher, student and budget) and the method's own R2 and R3 (which have no mode). The drop between two
consecutive rungs names the component that loses the accuracy; :func:`diagnosis` says where the largest
drop is, from the numbers. A run with an :data:`ABLATIONS` switch (DGD's private images in place of the
generator's, or no VAE) stands beside its rung without being its run, and :func:`ablation_clause` splits the
R1 -> R3 drop with it. Everything here formats run figures; no number is typed.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from omegaconf import DictConfig

from dpsd.report.cells import RUN
from dpsd.report.figures import _label_log_axis, save_png
from dpsd.report.readings import off_default
from dpsd.report.tables import DASH, fmt_eps, fmt_mean_std, fmt_number, is_stale, markdown_table

RUNGS = {
    "R0": "teacher",
    "R1": "KD on the private data",
    "R2": "KD on N(0, 1) noise (no generator)",
    "R3": "the method's data-free loop, no privacy",
    "R4": "the mechanism without noise",
    "R5": "the method at its ε",
}
# what the drop from the rung above to this one means (DESIGN.md "The ladder")
LOSS = {
    "R1": "the student's capacity at this budget",
    "R2": "what the teacher's soft labels carry without any image prior",
    "R3": "the generator and its losses",
    "R4": "the mechanism's structure",  # its steps, as the ladder's runs take them: structure()
    "R5": "the noise",
}
COLUMNS = ("Ladder", "Rung", "What", "Setting", "Accuracy (%)", "Change (points)", "ε claimed", "ε rigorous",
           "Queries", "Seeds")
# Switches whose value away from the default is a labelled variant (not the paper's method): key, default, and the
# methods it applies to (empty: every method that has the key).
VARIANTS = (("privacy.rr_prior", "topk", ()), ("method.output_step_scale", "paper", ()), ("method.warm_start_steps", 0, ()),
            ("method.distillation_loss", "dkd", ("dpsd", "dpsd_t", "dpdfd", "fed_dpsd")),  # dkd_as_printed: Eq. (2)'s misprint
            ("method.student_steps", 1, ("dpsd", "dpsd_t", "dpdfd", "fed_dpsd")),  # Alg. 1 line 5 updates the student once
            ("method.latents", "resample", ("fed_dpsd",)),  # trainable: DPSD's batch Z, not Alg. 2 line 3
            ("method.top_k_in_data_mode", False, ("fed_dpsd",)))  # true: M_k, which Alg. 2's Fed-FlexPer does not apply
# Switches that swap or take out one part of a method's loop (the paper's own ablations, e.g. DGD's Fig. 7): a run
# with a non-default value stands beside its rung, named by what it changes, and is not that rung's run. Each
# entry: the switch, its default, what it changes in words (``{value}``: the run's value), and whether it puts
# held-out private images in place of the generator's (alone, such a run measures what the generator costs).
ABLATIONS = (
    ("method.vae_data", "synthetic", "held-out private images in place of the generator's", True),
    ("method.vae_regulariser", True, "no VAE regulariser (cross-entropy on the labelled queries only)", False),
    ("method.queries", 400, "{value:,} labelled queries in place of the ladder's 400", False),
)
GENERATOR_SWAPS = tuple(key.partition(".")[2] for key, _, _, swaps_generator in ABLATIONS if swaps_generator)


# The steps a noiseless mechanism (R4) adds to the data-free loop (R3), each with the rung or switch that isolates it,
# as each method runs them in each privacy mode (structure()): a drop R3 -> R4 is lost to these, and R4 -> R5 to the
# noise. R3 learns the teacher's softmax (DGD: its ensemble's vote shares) in every mode.
ONE_HOT = ("soft → one-hot labels{averaged} (R4 at privacy.k = the number of classes, whose top-k keeps every class, "
           "isolates it)")
TOP_K_RULE = ("Eq. (5)'s top-k rule with the student as the label prior{each} (the teacher's class is used only "
              "inside the student's top-k, else a class drawn from it: the rest of the drop; a run's topk_survival is "
              "the share of its answers the rule kept, and sweeps/dpsd_topk_survival.yaml runs R4 and R5 over k)")
OUTPUT_STEP = ("the output step (the student learns its own outputs moved by γ_s along the teacher's bounded gradient, "
               "not the teacher's softmax; method.output_step_scale=inverse_bound, a labelled repair, isolates its size)")
BOUND = "the gradient's bound β (privacy.bound=normalize as {equation}, or clip; R4's Setting gives β)"
TOP_K_GRADIENT = "the gradient's top-k M_k (privacy.k = the number of classes keeps every entry and isolates it)"
UNDESCRIBED = "its steps without the noise"  # a mechanism structure() does not describe, or rows without a config


def structure(cfg: DictConfig) -> str:
    """What R4 adds to R3 in ``cfg``'s mechanism, step by step as its method runs it in its privacy mode, each step
    named with the rung or switch that isolates it: what a drop R3 -> R4 is lost to (the noise is R4 -> R5's)."""
    name, mode, method = str(cfg.method.name), str(cfg.privacy.mode), cfg.method
    federated = name == "fed_dpsd"
    if mode == "label" and name in ("dpsd", "dpsd_t", "fed_dpsd"):
        averaged = " averaged over the clients" if federated else ""
        if cfg.privacy.get("rr_prior") == "rr_with_prior":
            prior = ("RRWithPrior's set chosen from the student's prior (the teacher's class is used only inside it; "
                     "privacy.rr_prior=topk, Eq. (5), is the paper's)")
        else:
            prior = TOP_K_RULE.format(each=", at each client" if federated else "")
        return f"{ONE_HOT.format(averaged=averaged)} and {prior}"
    if mode == "label" and name == "dp_dfd":
        selective = ("the selective set I with the student as the label prior (the teacher's class is used only "
                     "inside I = {y_s > t}, at least the student's top two, else a class drawn from I)")
        if method.get("keep_answer") == "soft":
            return (f"{selective}; a kept answer is the teacher's raw probability vector (method.keep_answer=soft) "
                    "and only a drawn one is one-hot")
        return f"{selective} and soft → one-hot labels (method.keep_answer=soft, the teacher's raw answer, isolates it)"
    if mode == "label" and name in ("dgd", "dgd_plus"):
        return "the ensemble's vote shares → the one-hot argmax of its votes, its only step"
    if mode == "data" and name in ("dpsd", "dpsd_t", "dpdfd", "fed_dpsd"):
        topk = name not in ("dpdfd", "fed_dpsd") or (federated and method.get("top_k_in_data_mode"))
        steps = [OUTPUT_STEP, BOUND.format(equation={"dpdfd": "Eq. (4)", "fed_dpsd": "Alg. 2"}.get(name, "Eq. (3)"))]
        steps += [TOP_K_GRADIENT] if topk else []
        return ", ".join(steps[:-1]) + " and " + steps[-1]
    return UNDESCRIBED


def rung(cfg: DictConfig) -> str:
    """The rung a run stands on, from its config."""
    name = str(cfg.method.name)
    if name == "teacher":
        return "R0"
    if name == "kd_data":
        return "R1"
    if cfg.privacy.mode == "none":
        return "R2" if cfg.model.generator.get("name") == "gaussian_noise" else "R3"
    return "R4" if cfg.privacy.get("noiseless") else "R5"


def variant(cfg: DictConfig) -> str:
    """The labelled variant a run uses ("" for the paper's method): e.g. ``rr_prior=rr_with_prior``."""
    applies = tuple((key, default) for key, default, methods in VARIANTS if not methods or cfg.method.name in methods)
    return " ".join(f"{leaf}={value}" for leaf, value, _ in _switched(cfg, applies))


def _switched(cfg: DictConfig, switches: tuple) -> list[tuple[str, object, tuple]]:
    """``(leaf, value, entry)`` for each switch of ``switches`` that ``cfg`` sets away from its default."""
    found = []
    for entry in switches:
        key, default = entry[0], entry[1]
        section, _, leaf = key.partition(".")
        value = cfg[section].get(leaf)
        if value is not None and value != default:
            found.append((leaf, value, entry))
    return found


def ablation(cfg: DictConfig) -> str:
    """The ablation switches a run sets, as overrides (``vae_data=private vae_regulariser=false``; "" for none)."""
    return " ".join(f"{leaf}={str(value).lower() if isinstance(value, bool) else value}"
                    for leaf, value, _ in _switched(cfg, ABLATIONS))


def ablation_what(cfg: DictConfig) -> str:
    """What an ablation run changes in words ("" for none); ``{value}`` in an entry's words is the run's value."""
    return " + ".join(entry[2].format(value=value) for _, value, entry in _switched(cfg, ABLATIONS))


def reading_words(reading: str) -> str:
    """How a ladder or a query-budget row names a faithful reading other than the default (:func:`off_default`)."""
    return f"reading {reading}: not the default"


def ladder_name(cfg: DictConfig) -> str:
    """The ladder a private rung (R4, R5) belongs to: method, mode, ablation, a faithful reading other than the
    method's default (:func:`dpsd.report.readings.off_default`: a run made before its default changed) and variant."""
    label = f"{cfg.method.name} ({cfg.privacy.mode}" + (f", {ablation(cfg)}" if ablation(cfg) else "")
    reading = off_default(cfg)
    label += f", {reading_words(reading)}" if reading else ""
    extra = variant(cfg)
    return label + (f", {extra}: not the paper's method)" if extra else ")")


def setting(cfg: DictConfig) -> str:
    """What distinguishes runs on the same rung: the ablation switches, the target ε (R5) or the bound β (R4,
    data mode)."""
    if ablation(cfg):
        return ablation(cfg)
    if rung(cfg) == "R5":
        eps = cfg.privacy.get("epsilon")
        return f"ε = {eps:g}" if eps is not None else DASH
    if rung(cfg) == "R4" and cfg.privacy.mode == "data":
        return f"β = {cfg.privacy.beta:g}"
    return ""


def annotate(groups: pd.DataFrame) -> pd.DataFrame:
    """The groups with ``rung``, ``what``, ``setting``, ``ablation`` (its switches), ``ablation_what`` (what
    they change) and ``ladder`` columns (rungs R0-R3: ``ladder`` missing, NaN)."""
    if groups.empty:
        return groups.assign(rung=[], what=[], setting=[], ablation=[], ablation_what=[], ladder=[], base_method=[],
                             reading=[])
    frame = groups.copy()
    frame["rung"] = [rung(cfg) for cfg in frame["config"]]
    frame["ablation"] = [ablation(cfg) for cfg in frame["config"]]
    frame["ablation_what"] = [ablation_what(cfg) for cfg in frame["config"]]
    frame["what"] = [f"{RUNGS[r]}, with {changes}" if changes else RUNGS[r]
                     for r, changes in zip(frame["rung"], frame["ablation_what"])]
    frame["setting"] = [setting(cfg) for cfg in frame["config"]]
    frame["base_method"] = [str(cfg.method.name) for cfg in frame["config"]]
    frame["reading"] = [off_default(cfg) for cfg in frame["config"]]
    frame["ladder"] = [ladder_name(cfg) if r in ("R4", "R5") else None for cfg, r in zip(frame["config"], frame["rung"])]
    return frame


def ladders(groups: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Each ladder's rungs R0..R5 in order: the shared R0/R1, the method's R2/R3 at the ladder's reading, its own
    R4/R5."""
    frame = annotate(groups)
    out: dict[str, pd.DataFrame] = {}
    for name in dict.fromkeys(frame["ladder"].dropna()):
        first = frame[frame["ladder"] == name].iloc[0]
        shared = frame["rung"].isin(["R0", "R1"])
        own = (frame["rung"].isin(["R2", "R3"]) & (frame["base_method"] == first["base_method"])
               & (frame["reading"] == first["reading"]))
        rows = frame[shared | own | (frame["ladder"] == name)]
        out[name] = rows.sort_values(["rung", "order"]).reset_index(drop=True)
    return out


def _ablations(rows: pd.DataFrame) -> pd.Series:
    """Which rows are ablation runs (rows built without an ``ablation`` column have none)."""
    if "ablation" not in rows:
        return pd.Series(False, index=rows.index)
    return rows["ablation"].fillna("").astype(str) != ""


def _best_row(rows: pd.DataFrame, name: str) -> pd.Series | None:
    """The best finished run on rung ``name`` (None without one); ablation runs stand beside the rung, not on it."""
    done = rows[(rows["rung"] == name) & (rows["status"] == RUN) & ~_ablations(rows)].dropna(subset=["accuracy"])
    return done.loc[done["accuracy"].idxmax()] if len(done) else None


def _best(rows: pd.DataFrame, name: str) -> float:
    """The accuracy of :func:`_best_row`; NaN without a finished run."""
    best = _best_row(rows, name)
    return math.nan if best is None else float(best["accuracy"])


def _queries(row: pd.Series) -> str:
    value = row.get("metrics.queries", math.nan)
    return DASH if value is None or (isinstance(value, float) and math.isnan(value)) else f"{int(value):,}"


def _accuracy_text(row: pd.Series) -> str:
    """A finished cell's accuracy, mean ± sample std over its seeds, ``(stale)`` where other code of its method than
    this checkout's recorded it (:func:`dpsd.report.tables.is_stale`)."""
    stale = " (stale)" if is_stale(row.get("code_version", "")) else ""
    return fmt_mean_std(row["accuracy"], row.get("accuracy_std", math.nan)) + stale


def ladder_table(name: str, rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the ladder; ``Change`` is this run minus the best run of the rung above
    (negative: accuracy lost; for an ablation run: against the best run of its own rung, what the
    ablation changes); an accuracy recorded by other code of its method than this checkout's reads ``(stale)``."""
    body = []
    for (_, row), swapped in zip(rows.iterrows(), _ablations(rows)):
        above = row["rung"] if swapped else f"R{int(row['rung'][1]) - 1}" if row["rung"] != "R0" else None
        reference = _best(rows, above) if above else math.nan
        run = row["status"] == RUN
        change = row["accuracy"] - reference if run and not math.isnan(reference) else math.nan
        private = row["rung"] in ("R4", "R5")
        body.append({
            "Ladder": name, "Rung": row["rung"], "What": row["what"], "Setting": row["setting"] or DASH,
            "Accuracy (%)": _accuracy_text(row) if run else row["status"],
            "Change (points)": DASH if math.isnan(change) else f"{change:+.2f}",
            "ε claimed": fmt_eps(row["eps_claimed"]) if run and private else ("∞" if run else DASH),
            "ε rigorous": fmt_eps(row["eps_rigorous"]) if run and private else ("∞" if run else DASH),
            "Queries": _queries(row) if run and row["rung"] != "R0" else DASH,  # the teacher answers none
            "Seeds": f"{row['seeds']}/{row['planned_seeds']}",
        })
    return pd.DataFrame(body, columns=list(COLUMNS))


def diagnosis(name: str, rows: pd.DataFrame) -> str:
    """One sentence: between which consecutive rungs (best run of each) the most accuracy is lost; where
    rungs have not run, between the nearest finished ones, and it says the loss is not yet attributed.

    R2 (KD on noise) stands on the path only while it is no better than R3: where the method's
    generator beats noise (R3 > R2), the data-free loop is reached from R1 directly, and the drop
    R1 -> R3 is what replacing the private data by that generator costs (R2 is then named beside it).

    Where the next-largest drop is within the seeds' spread of the largest (the two differ by no more than the
    largest sample std of the rungs' best runs on either step), the sentence names both, about equally: the runs
    do not tell them apart. A rung of one seed has no spread, so it never makes a tie."""
    best = {r: _best(rows, r) for r in RUNGS}
    path = list(RUNGS)
    bypassed = not (math.isnan(best["R2"]) or math.isnan(best["R3"])) and best["R3"] > best["R2"]
    if bypassed:
        path.remove("R2")
    finished = [r for r in path if not math.isnan(best[r])]  # a step over rungs not run spans them
    steps = sorted(((best[upper] - best[lower], upper, lower) for upper, lower in zip(finished, finished[1:])),
                   reverse=True)
    missing = [r for r, value in best.items() if math.isnan(value)]
    if not steps:
        return f"{name}: fewer than two rungs have finished runs yet (missing: {', '.join(missing)})."
    drop, upper, lower = steps[0]
    tail = f" (rungs not run yet: {', '.join(missing)})" if missing else ""
    if drop <= 0:
        return f"{name}: no rung loses accuracy against the one above it{tail}."

    def loss(step: tuple[float, str, str]) -> str:
        drop, upper, lower = step
        return (f"between {upper} and {lower} ({best[upper]:.2f}% → {best[lower]:.2f}%, {drop:.2f} points), "
                f"i.e. to {_cause(upper, lower, path, best, rows)}")

    spreads = [_best_std(rows, r) for step in steps[:2] for r in step[1:]]
    spread = max((value for value in spreads if not math.isnan(value)), default=math.nan)
    tied = len(steps) > 1 and steps[1][0] > 0 and drop - steps[1][0] <= spread  # False with a NaN spread
    if tied:
        said = (f"accuracy is lost about equally {loss(steps[0])}, and {loss(steps[1])}: the two differ by "
                f"{drop - steps[1][0]:.2f} points, within the seeds' spread (a sample std up to {spread:.2f})")
    else:
        said = f"accuracy is lost mostly {loss(steps[0])}"
    return f"{name}: {said}{tail}.{ablation_clause(rows)}{noise_cost(rows)}"


def _cause(upper: str, lower: str, path: list[str], best: dict[str, float], rows: pd.DataFrame) -> str:
    """What the drop from rung ``upper`` to rung ``lower`` of ``path`` is lost to (:func:`diagnosis`)."""
    if path.index(lower) - path.index(upper) > 1:
        return "one of the components the rungs between them would separate, not yet told apart"
    if (upper, lower) == ("R1", "R3"):
        return f"the private data replaced by the method's generator, which beats N(0, 1) noise (R2 {best['R2']:.2f}%)"
    if lower == "R4":
        return f"{LOSS['R4']}: {_structure(rows)}"
    return LOSS[lower]


def _best_std(rows: pd.DataFrame, name: str) -> float:
    """The sample std over the seeds of rung ``name``'s best run (:func:`_best_row`); NaN for one seed, or rows
    without an ``accuracy_std`` column."""
    best = _best_row(rows, name)
    return math.nan if best is None else float(best.get("accuracy_std", math.nan))


def _structure(rows: pd.DataFrame) -> str:
    """:func:`structure` of the ladder's mechanism, read from its first private run's config (:data:`UNDESCRIBED`
    for rows without configs)."""
    private = rows[rows["rung"].isin(["R4", "R5"])] if "config" in rows else rows.iloc[0:0]
    return structure(private["config"].iloc[0]) if len(private) else UNDESCRIBED


def ablation_clause(rows: pd.DataFrame) -> str:
    """The ablation runs beside R3, a clause after :func:`diagnosis`'s sentence: each one's accuracy, and where
    one swaps only the generator's images for private ones (its accuracy P), the R1 -> R3 drop split into
    R1 - P (what remains with private images: the labelled-query budget and the student) and P - R3 (the
    generator's images). ``""`` without a finished ablation run beside R3."""
    swapped = rows[_ablations(rows) & (rows["rung"] == "R3") & (rows["status"] == RUN)].dropna(subset=["accuracy"])
    if swapped.empty:
        return ""
    parts = [f"{row['ablation_what']}: {row['accuracy']:.2f}%" for _, row in swapped.iterrows()]
    clause = f" R3 taken apart: {'; '.join(parts)}."
    generator_only = swapped[[len(a.split()) == 1 and a.partition("=")[0] in GENERATOR_SWAPS for a in swapped["ablation"]]]
    r1, r3 = _best(rows, "R1"), _best(rows, "R3")
    if len(generator_only) and not (math.isnan(r1) or math.isnan(r3)):
        private = float(generator_only["accuracy"].max())
        clause += (f" Of the R1 → R3 drop, {r1 - private:.2f} points remain with private images in place of the "
                   f"generator's (the labelled-query budget and the student) and {private - r3:.2f} are the generator's.")
    return clause


def noise_cost(rows: pd.DataFrame) -> str:
    """What the noise costs at each ε: every finished R5 run against the best R4 run (R3 where R4 has not
    run), a clause after the sentence of :func:`diagnosis`, whose best-run comparison hides an ε that loses
    far more than another (``""`` without an R5 run or a reference)."""
    reference_rung = "R3" if math.isnan(_best(rows, "R4")) else "R4"
    reference = _best(rows, reference_rung)
    runs = rows[(rows["rung"] == "R5") & (rows["status"] == RUN)].dropna(subset=["accuracy"])
    if math.isnan(reference) or runs.empty:
        return ""
    costs = [f"{abs(reference - row['accuracy']):.2f} points {'lost' if reference >= row['accuracy'] else 'gained'} "
             f"at {row.get('setting') or 'its ε'} ({row['accuracy']:.2f}%)" for _, row in runs.iterrows()]
    return f" The noise, against {reference_rung} ({reference:.2f}%): {'; '.join(costs)}."


def ladder_figure(name: str, rows: pd.DataFrame, caption: str, path: Path) -> Path:
    """Bars: each run of the ladder at its rung (several per rung: ε, β or an ablation, in a lighter colour), both
    ledgers in the labels; the figure widens with its bars and heightens with its caption."""
    width = max(7.5, 0.9 * len(rows))
    lines = textwrap.wrap(caption, width=int(width * 21))  # about 21 characters an inch at 6 points: wider ones fit
    height = 3.6 + 0.1 * len(lines)
    figure = Figure(figsize=(width, height), dpi=100)
    axes = figure.add_subplot(1, 1, 1)
    labels, values, colors = [], [], []
    palette = {"R0": "#555", "R1": "#1f77b4", "R2": "#2ca02c", "R3": "#9467bd", "R4": "#ff7f0e", "R5": "#d62728"}
    for _, row in rows.iterrows():
        eps = (f"\nε {fmt_eps(row['eps_claimed'])} / {fmt_eps(row['eps_rigorous'])}"
               if row["rung"] in ("R4", "R5") and row["status"] == RUN else "")
        setting = str(row["setting"]).replace(" ", "\n").replace("=", "=\n") if row.get("ablation") else row["setting"]
        labels.append(f"{row['rung']}{(chr(10) + setting) if setting else ''}{eps}")
        values.append(row["accuracy"] if row["status"] == RUN else 0.0)
        colors.append(("#c5b0d5" if row.get("ablation") else palette[row["rung"]]) if row["status"] == RUN else "#ddd")
    positions = range(len(values))
    axes.bar(positions, values, color=colors)
    for x, (value, (_, row)) in enumerate(zip(values, rows.iterrows())):
        axes.text(x, value + 1, f"{value:.1f}" if row["status"] == RUN else row["status"], ha="center", fontsize=7)
    axes.set_xticks(list(positions))
    axes.set_xticklabels(labels, fontsize=6)
    axes.set_ylim(0, 105)
    axes.set_ylabel("student test accuracy (%)")
    figure.suptitle(f"Ladder: {name}", fontsize=10)
    figure.text(0.01, 0.01, "\n".join(lines), fontsize=6, ha="left", va="bottom")
    figure.tight_layout(rect=(0, (0.15 + 0.1 * len(lines)) / height, 1, 1))
    return save_png(figure, path)


# ------------------------------------------------------------------------------- the query axis


def query_table(groups: pd.DataFrame) -> pd.DataFrame:
    """One row per run: ladder, rung, teacher queries made, accuracy and both ledgers; sorted by method,
    rung and the axis (steps per iteration, i.e. queries), cells not run last within their rung."""
    frame = annotate(groups)
    rows, keys = [], []
    # R0-R3 have no ladder of their own: the method names them, and the reading where it is not the default
    names = [ladder if isinstance(ladder, str) else f"{method} ({reading_words(reading)})" if reading else method
             for ladder, method, reading in zip(frame["ladder"], frame["base_method"], frame["reading"])]
    for (_, row), name in zip(frame.iterrows(), names):
        run = row["status"] == RUN
        rows.append({
            "Method": name, "Rung": row["rung"],
            "Steps per iteration": str(row["config"].method.get("steps_per_iteration", 1)),
            "Queries": _queries(row) if run else DASH,
            "Accuracy (%)": _accuracy_text(row) if run else row["status"],
            "ε claimed": fmt_eps(row["eps_claimed"]) if run else DASH,
            "ε rigorous": fmt_eps(row["eps_rigorous"]) if run else DASH,
        })
        keys.append((str(name), str(row["rung"]), float(row["config"].method.get("steps_per_iteration", 1))))
    order = sorted(range(len(rows)), key=keys.__getitem__)
    return pd.DataFrame([rows[i] for i in order], columns=list(rows[0]) if rows else None)


def query_figure(groups: pd.DataFrame, caption: str, path: Path) -> Path:
    """Accuracy against teacher queries (log x), one panel per method, one line per rung; each point
    labelled with its ε claimed / ε rigorous."""
    frame = annotate(groups)
    done = frame[(frame["status"] == RUN) & frame.get("metrics.queries", pd.Series(dtype=float)).notna()] \
        if "metrics.queries" in frame else frame.iloc[0:0]
    methods = list(dict.fromkeys(frame["base_method"])) if len(frame) else []
    columns = max(1, min(len(methods), 2))
    height = 3.8 * math.ceil(max(len(methods), 1) / columns) + 0.8
    figure = Figure(figsize=(6.2 * columns, height), dpi=100)
    for index, method in enumerate(methods or ["none"]):
        axes = figure.add_subplot(math.ceil(max(len(methods), 1) / columns), columns, index + 1)
        mine = done[done["base_method"] == method] if len(done) else done
        xs = []
        for (label, rung_name), points in mine.groupby([mine["ladder"].fillna(method), "rung"], sort=True):
            points = points.sort_values("metrics.queries")
            axes.plot(points["metrics.queries"], points["accuracy"], marker="o", label=f"{rung_name} {label}")
            for _, point in points.iterrows():
                if rung_name in ("R4", "R5"):
                    axes.annotate(f"{fmt_eps(point['eps_claimed'])}/{fmt_eps(point['eps_rigorous'])}",
                                  (point["metrics.queries"], point["accuracy"]), fontsize=6,
                                  textcoords="offset points", xytext=(3, 3))
            xs += list(points["metrics.queries"])
        if xs:
            axes.set_xscale("log")
            _label_log_axis(axes, xs)
            axes.legend(fontsize=6)
        axes.set_title(method, fontsize=9)
        axes.set_xlabel("teacher queries")
        axes.set_ylabel("student test accuracy (%)")
        axes.set_ylim(0, 100)
    figure.suptitle("Accuracy vs teacher queries (points: ε claimed / ε rigorous)", fontsize=10)
    figure.text(0.01, 0.01, caption, fontsize=6, ha="left", va="bottom", wrap=True)
    figure.tight_layout(rect=(0, 0.6 / height, 1, 1))
    return save_png(figure, path)


def ladder_markdown(title: str, tables: dict[str, pd.DataFrame], sentences: list[str], figures: list[str],
                    verdicts: dict[str, str] | None = None) -> str:
    """The ladder section of ``dpsd report --markdown``: one diagnosis per method, then each table, a paper
    method's headed by its verdict where ``verdicts`` (keyed as the ladders are named) has one."""
    parts = [f"## {title}", "", *[f"* {sentence}" for sentence in sentences], "",
             "Accuracy: student test accuracy, the mean ± sample std over the seeds run (Seeds: run / planned); "
             "Change: against the best cell of the rung above.", ""]
    for (name, body), figure in zip(tables.items(), figures):
        verdict = (verdicts or {}).get(name)
        head = [f"**Verdict** (the README's, from the headline cells): {verdict}.", ""] if verdict else []
        parts += [f"### {name}", "", *head, markdown_table(body), "", f"![{name}]({figure})", ""]
    return "\n".join(parts)
