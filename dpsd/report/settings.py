"""The "setting vs paper" block that opens each results page: what the paper states for its MNIST
experiments (``results/reference/settings.csv``: one row per paper, method and setting, each with the
line it quotes) beside what our cells of that method ran with, read from their resolved configs, and
the runs' wall minutes. A setting the paper does not state is "not stated"; a value we do not set is
"—"; nothing here is typed.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Callable

import pandas as pd
from omegaconf import OmegaConf

from dpsd.report.cells import RUN, SEPARATORS
from dpsd.report.tables import DASH, normalization_words
from dpsd.tracking import LOAD_METRIC

SETTINGS_NAME = "settings.csv"  # beside the papers' numbers (results/reference/papers.csv)
KEYS = ("teacher", "student", "generator", "iterations", "batch_size", "student_optimizer", "generator_optimizer",
        "image_size", "normalization", "epsilon_delta", "noise", "hardware")
STAGED = ("dp_dfd",)  # methods that train in stages of samples (DP-DFD Alg. 1) rather than iterations


def settings_path(reference_csv: Path) -> Path:
    """The papers' settings file: ``settings.csv`` in the folder of the papers' numbers."""
    return Path(reference_csv).with_name(SETTINGS_NAME)


def load_settings(path: Path) -> pd.DataFrame:
    """The papers' settings (columns paper, method, dataset, key, value, source); empty without the file."""
    path = Path(path)
    if not path.is_file():
        return pd.DataFrame(columns=["paper", "method", "dataset", "key", "value", "source"])
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def _get(cfg, key: str):
    return OmegaConf.select(cfg, key, default=None)


def _join(*parts) -> str:
    return ", ".join(str(p) for p in parts if p is not None and p != "") or DASH


def ours(cfg, key: str) -> str:
    """What one of our cells ran with, for a settings key, read from its resolved config."""
    method, teacher = cfg.method, cfg.model.teacher
    if key == "teacher":
        return str(teacher.arch)
    if key == "student":
        return str(_get(cfg, "model.student.arch") or DASH)
    if key == "generator":
        return str(_get(cfg, "model.generator.name") or DASH)
    staged = method.name in STAGED  # a spec's ``++method.stages`` reaches every method's config; only these read it
    if key == "iterations":
        if staged:
            return f"{method.stages} stages"
        steps = _get(cfg, "method.steps_per_iteration") or 1
        return _join(f"{method.iterations} iterations" if _get(cfg, "method.iterations") is not None else None,
                     f"{steps} steps each" if steps != 1 else None)
    if key == "batch_size":
        return _join(_get(cfg, "method.batch_size"), f"{method.samples_per_stage} samples a stage" if staged else None)
    if key in ("student_optimizer", "generator_optimizer"):
        lr = _get(cfg, f"method.{key.split('_')[0]}_lr")
        return _join(_get(cfg, "method.optimizer") or ("Adam" if lr is not None else None),
                     f"lr {lr}" if lr is not None else None)
    if key == "image_size":
        return str(_get(cfg, "model.teacher.input.image_size") or "the dataset's own (28 on MNIST)")
    if key == "normalization":
        return normalization_words(_get(cfg, "model.teacher.input.normalization"), long=True)
    if key == "epsilon_delta":
        if cfg.privacy.mode == "none":
            return "non-private"
        target = cfg.privacy.epsilon
        return _join(f"ε {target}" if target is not None else "no ε target", f"δ {cfg.privacy.delta}")
    if key == "noise":
        if cfg.privacy.mode == "data":
            return _join(f"σ {cfg.privacy.sigma}", f"β {cfg.privacy.beta}", f"k {cfg.privacy.k}")
        if cfg.privacy.mode == "label":
            return _join(f"k {cfg.privacy.k}", f"calibrate {cfg.privacy.calibrate}")
        return DASH
    raise KeyError(key)


def cell_groups(count: int, possessive: bool = False) -> str:
    """``count`` cell groups in words, singular for one ("1 cell group's", "3 cell groups'")."""
    noun = "cell group" if count == 1 else "cell groups"
    return f"{count} {noun}" + (("'s" if count == 1 else "'") if possessive else "")


def hardware(groups: pd.DataFrame) -> str:
    """The machines the groups' runs recorded (their ``hardware`` tag), or why there is none."""
    recorded = groups.get("hardware", pd.Series("", index=groups.index)).fillna("")
    machines = dict.fromkeys(m for words in recorded for m in str(words).split(SEPARATORS["hardware"]) if m)
    unrecorded = "not recorded by these runs (before the hardware tag; docs/reproducing.md names each sweep's machine)"
    if not machines:
        return unrecorded
    missing = int((recorded == "").sum())
    return " / ".join(machines) + (f" / {missing} of {cell_groups(len(recorded))} {unrecorded}" if missing else "")


def machine_load(done: pd.DataFrame) -> str:
    """How busy the machine was as the groups' runs ended (their :data:`~dpsd.tracking.LOAD_METRIC`), as a clause
    for the wall minutes; "" where no run recorded it (runs recorded before the metric)."""
    load = done.get(f"metrics.{LOAD_METRIC}", pd.Series(dtype=float)).dropna()
    if not len(load):
        return ""
    return f"; machine load per core as they ended: median {load.median():.2f} of {cell_groups(len(load))}, 1 = every core busy"


def settings_tables(groups: pd.DataFrame, settings: pd.DataFrame, dataset: str = "mnist") -> tuple[list[dict], list[str]]:
    """Per method of ``groups`` on ``dataset`` that the settings file names: ``{"method", "paper", "rows"}`` with rows
    of (setting, the paper's value with a numbered source, ours: each distinct value of the method's cells), the last
    the cells' mean wall minutes; and the sources, numbered from 1 in order. Both empty when no method is named."""
    if groups.empty or settings.empty:
        return [], []
    groups = groups[groups["dataset"] == dataset]  # the papers' settings are their MNIST experiments'
    tables, sources = [], []
    for method in dict.fromkeys(groups["method"]):
        paper_rows = settings[(settings["method"] == method) & (settings["dataset"] == dataset)]
        if paper_rows.empty:
            continue
        mine = groups[groups["method"] == method]
        rows = []
        for key in KEYS:
            stated = paper_rows[paper_rows["key"] == key]
            paper = []
            for _, row in stated.iterrows():
                if row["source"] not in sources:
                    sources.append(row["source"])
                paper.append(f"{row['value']} [{sources.index(row['source']) + 1}]")
            values = (hardware(mine) if key == "hardware"
                      else " / ".join(dict.fromkeys(ours(cfg, key) for cfg in mine["config"])))
            rows.append((key.replace("_", " "), "; ".join(paper) or "not stated", values))
        done = mine[mine["status"] == RUN]
        minutes = done.get("wall_s", pd.Series(dtype=float)).dropna() / 60
        rows.append(("wall minutes a cell", "—",
                     f"{minutes.mean():.1f} (mean of {cell_groups(len(minutes), possessive=True)} runs{machine_load(done)})"
                     if len(minutes) and not math.isnan(minutes.mean()) else "no run"))
        tables.append({"method": method, "paper": paper_rows["paper"].iloc[0], "rows": rows})
    return tables, sources


def settings_block(groups: pd.DataFrame, settings: pd.DataFrame, dataset: str = "mnist") -> str:
    """Per method of ``groups`` on ``dataset`` that the settings file names: a table of setting, the paper's value (with
    a numbered source) and ours (each distinct value of the method's cells), then the cells' mean wall
    minutes (:func:`settings_tables`), as Markdown. Empty when no method is named."""
    tables, sources = settings_tables(groups, settings, dataset)
    if not tables:
        return ""
    parts = []
    for table in tables:
        lines = [f"**{table['method']}** (paper: {table['paper']})", "", "| Setting | Paper | Ours |", "| --- | --- | --- |"]
        lines += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"
                  for cells in table["rows"]]
        parts.append("\n".join(lines))
    notes = [f"[{i}] `{source}`  " for i, source in enumerate(sources, 1)]
    return "\n\n".join([*parts, "\n".join(["Sources (results/reference/settings.csv): ", *notes])])


def settings_html(groups: pd.DataFrame, settings: pd.DataFrame, dataset: str = "mnist") -> str:
    """The tables of :func:`settings_block` as HTML, one ``<table>`` per method (a caption naming it and its paper),
    then the numbered sources; empty when no method is named."""
    tables, sources = settings_tables(groups, settings, dataset)
    if not tables:
        return ""
    parts = ['<div class="settings"><h3>Setting vs paper</h3><div class="settings-grid">']
    for table in tables:
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>" for cells in table["rows"])
        parts.append(f'<table class="settings-table"><caption><b>{html.escape(table["method"])}</b> (paper: '
                     f'{html.escape(table["paper"])})</caption><thead><tr><th>Setting</th><th>Paper</th><th>Ours</th>'
                     f"</tr></thead><tbody>{body}</tbody></table>")
    notes = "".join(f"<li><code>{html.escape(source)}</code></li>" for source in sources)
    parts.append(f'</div><p class="legend">Sources (results/reference/settings.csv):</p><ol class="settings-sources">{notes}</ol></div>')
    return "".join(parts)

# What a row of settings.csv states of one config key, where it states one value the config can hold: (settings key,
# a pattern its value matches, the config key, the value it states: a function of the pattern's match, the cell's
# config and the paper row's architecture text (papers.csv; "" where unknown), the words the "differs" column uses).
# A row no rule matches states no config value (a range, an ablation, a free-text architecture, the ε the cell is run
# at); a rule whose config key the method does not have (DAFL's Adam, fixed in its code) is not checked.
def _student(match, cfg, architecture: str) -> str:
    """DP-DFD's student is per experiment: ResNet-18 where the paper row names it (its label-sensitive Table II),
    else the DataLens CNN (its data-sensitive Table I)."""
    return "resnet18" if re.search(r"student resnet-?18", architecture, re.I) else "datalens_cnn"


def _beta(match, cfg, architecture: str) -> float:
    epsilon = OmegaConf.select(cfg, "privacy.epsilon", default=None)
    return 0.001 if epsilon is not None and epsilon <= 1 else 0.005


RULES: tuple[tuple[str, str, str, Callable, str], ...] = (
    ("teacher", r"(?i)\bresnet ?34\b|34-layer resnet|resnet teachers are 34-layer", "model.teacher.arch", lambda *_: "resnet34", "teacher"),
    ("teacher", r"^LeNet-5 \(LeNet5\)$", "model.teacher.arch", lambda *_: "lenet5", "teacher"),
    ("teacher", r"Dirichlet \(scaling ([\d.]+)\)", "method.dirichlet_alpha", lambda m, *_: float(m[1]), "Dirichlet α"),
    ("student", r"in data-sensitive experiments; Resnet18 in label-sensitive", "model.student.arch", _student,
     "student"),
    ("student", r"^(?!.*label-sensitive).*same network (configuration )?as DataLens", "model.student.arch",
     lambda *_: "datalens_cnn", "student"),
    ("student", r"^LeNet-5-half", "model.student.arch", lambda *_: "lenet5_half", "student"),
    ("generator", r"^latent_dim (\d+)$", "model.generator.latent_dim", lambda m, *_: int(m[1]), "latent size"),
    ("iterations", r"\bT=(\d+) iterations", "method.iterations", lambda m, *_: int(m[1]), "T"),
    ("iterations", r"^epochs: (\d+)$", "method.iterations",
     lambda m, cfg, _: int(m[1]) * int(cfg.method.iterations_per_epoch), "iterations"),
    ("iterations", r"^per epoch: (\d+) iterations$", "method.iterations_per_epoch", lambda m, *_: int(m[1]),
     "iterations an epoch"),
    ("batch_size", r"\bb=(\d+)", "method.batch_size", lambda m, *_: int(m[1]), "b"),
    ("batch_size", r"^(\d+)$", "method.batch_size", lambda m, *_: int(m[1]), "batch"),
    ("student_optimizer", r"\bAdam\b", "method.optimizer", lambda *_: "adam", "optimiser"),
    ("student_optimizer", r"γs=([\d.]+)", "method.output_step", lambda m, *_: float(m[1]), "γs"),
    ("student_optimizer", r"^lr ([\d.e-]+)$", "method.student_lr", lambda m, *_: float(m[1]), "student lr"),
    ("generator_optimizer", r"\bAdam\b", "method.optimizer", lambda *_: "adam", "optimiser"),
    ("generator_optimizer", r"γg=([\d.]+)", "method.generator_lr", lambda m, *_: float(m[1]), "γg"),
    ("generator_optimizer", r"^lr ([\d.e-]+)$", "method.generator_lr", lambda m, *_: float(m[1]), "generator lr"),
    ("image_size", r"^(\d+)×\1 ", "model.teacher.input.image_size", lambda m, *_: int(m[1]), "image side"),
    ("image_size", r"^MNIST resized to (\d+)×\1", "model.teacher.input.image_size", lambda m, *_: int(m[1]),
     "image side"),
    ("normalization", r"^Normalize mean 0\.1307, std 0\.3081", "model.teacher.input.normalization",
     lambda *_: "mean_std", "input"),
    ("noise", r"^σ=(\d+) \(noise scale\)", "privacy.sigma", lambda m, *_: float(m[1]), "σ"),
    ("noise", r"^β=10\^-3 when ε≤1, β=5×10\^-3 when 1<ε≤10", "privacy.beta", _beta, "β"),
    ("noise", r"^k=(\d+) for MNIST", "privacy.k", lambda m, *_: int(m[1]), "k"),
    ("noise", r"^m=(\d+) clients", "method.num_clients", lambda m, *_: int(m[1]), "clients"),
    ("noise", r"^threshold t=1/\(2·nc\)", "method.threshold", lambda *_: "paper", "threshold"),
    ("noise", r"^ε1=([\d.]+)$", "method.latent_epsilon", lambda m, *_: float(m[1]), "ε1"),
)
# Where a mode decides whether a config key is read: the noise keys only under their privacy mode.
MODES = {"privacy.sigma": ("data",), "privacy.beta": ("data",), "privacy.k": ("data", "label")}
# The side a config's null image size means: the dataset's own (the papers' settings are their MNIST experiments').
OWN_SIDE = {"mnist": 28, "fmnist": 28}
WORDS = {"small_cnn": "small CNN", "resnet34": "ResNet-34", "resnet18": "ResNet-18", "datalens_cnn": "DataLens CNN",
         "lenet5": "LeNet-5", "lenet5_half": "LeNet-5-half", "mean_std": "mean/std", "minus_one_one": "[-1, 1]"}


def stated(settings: pd.DataFrame, method: str, cfg, architecture: str = "", dataset: str = "mnist") -> list[dict]:
    """Every config value ``settings`` states for ``method`` on ``dataset`` that ``cfg`` can hold (:data:`RULES`):
    dicts of the settings row's ``key`` and ``value``, the config ``path``, ``paper`` (the value it states), ``ours``
    (``cfg``'s) and ``words``. ``architecture``: the paper row's (papers.csv), for a setting stated per experiment."""
    rows = settings[(settings["method"] == method) & (settings["dataset"] == dataset)] if len(settings) else settings
    found = []
    for _, row in rows.iterrows():
        for key, pattern, path, value, words in RULES:
            match = re.search(pattern, row["value"]) if key == row["key"] else None
            if match is None or OmegaConf.select(cfg, path, default=MISSING_KEY) is MISSING_KEY:
                continue
            if path in MODES and OmegaConf.select(cfg, "privacy.mode", default=None) not in MODES[path]:
                continue
            ours_value = OmegaConf.select(cfg, path)
            if path.endswith("image_size") and ours_value is None:
                ours_value = OWN_SIDE.get(str(OmegaConf.select(cfg, "dataset.name", default=dataset)), ours_value)
            found.append({"key": row["key"], "value": row["value"], "path": path, "words": words,
                          "paper": value(match, cfg, architecture), "ours": ours_value})
    return found


MISSING_KEY = object()


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def _shown(value) -> str:
    return WORDS.get(str(value), f"{value:g}" if isinstance(value, float) else str(value))


def differences(settings: pd.DataFrame, method: str, cfg, architecture: str = "", dataset: str = "mnist") -> list[str]:
    """What ``cfg`` sets otherwise than ``method``'s paper states (:func:`stated`), one phrase each:
    ``teacher small CNN (paper ResNet-34)``, ``b 128 (256)`` (the first phrase says "paper"); a noise scale the run
    solves for its ε target (``privacy.calibrate``) is said so. Empty where every stated value is ours."""
    phrases = []
    for item in stated(settings, method, cfg, architecture, dataset):
        if item["path"] == "privacy.sigma" and str(OmegaConf.select(cfg, "privacy.calibrate", default="off")) != "off":
            phrases.append(f"σ solved for the ε target ({_shown(item['paper'])})")
        elif not _same(item["ours"], item["paper"]):
            phrases.append(f"{item['words']} {_shown(item['ours'])} ({_shown(item['paper'])})")
    phrases = list(dict.fromkeys(phrases))
    if phrases:
        first = re.sub(r"\(([^()]*)\)$", r"(paper \1)", phrases[0])
        phrases[0] = first
    return phrases
