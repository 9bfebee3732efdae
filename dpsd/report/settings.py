"""The "setting vs paper" block that opens each results page: what the paper states for its MNIST
experiments (``results/reference/settings.csv``: one row per paper, method and setting, each with the
line it quotes) beside what our cells of that method ran with, read from their resolved configs, and
the runs' wall minutes. A setting the paper does not state is "not stated"; a value we do not set is
"—"; nothing here is typed.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from dpsd.report.cells import RUN, SEPARATORS
from dpsd.report.tables import DASH, normalization_words

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


def hardware(groups: pd.DataFrame) -> str:
    """The machines the groups' runs recorded (their ``hardware`` tag), or why there is none."""
    recorded = groups.get("hardware", pd.Series("", index=groups.index)).fillna("")
    machines = dict.fromkeys(m for words in recorded for m in str(words).split(SEPARATORS["hardware"]) if m)
    unrecorded = "not recorded by these runs (before the hardware tag; docs/reproducing.md names each sweep's machine)"
    if not machines:
        return unrecorded
    missing = int((recorded == "").sum())
    return " / ".join(machines) + (f" / {missing} of {len(recorded)} cell groups {unrecorded}" if missing else "")


def settings_block(groups: pd.DataFrame, settings: pd.DataFrame, dataset: str = "mnist") -> str:
    """Per method of ``groups`` on ``dataset`` that the settings file names: a table of setting, the paper's value (with
    a numbered source) and ours (each distinct value of the method's cells), then the cells' mean wall
    minutes. Empty when no method is named."""
    if groups.empty or settings.empty:
        return ""
    groups = groups[groups["dataset"] == dataset]  # the papers' settings are their MNIST experiments'
    parts, sources = [], []
    for method in dict.fromkeys(groups["method"]):
        paper_rows = settings[(settings["method"] == method) & (settings["dataset"] == dataset)]
        if paper_rows.empty:
            continue
        mine = groups[groups["method"] == method]
        lines = [f"**{method}** (paper: {paper_rows['paper'].iloc[0]})", "", "| Setting | Paper | Ours |",
                 "| --- | --- | --- |"]
        for key in KEYS:
            stated = paper_rows[paper_rows["key"] == key]
            paper = []
            for _, row in stated.iterrows():
                if row["source"] not in sources:
                    sources.append(row["source"])
                paper.append(f"{row['value']} [{sources.index(row['source']) + 1}]")
            values = (hardware(mine) if key == "hardware"
                      else " / ".join(dict.fromkeys(ours(cfg, key) for cfg in mine["config"])))
            cells = [key.replace("_", " "), "; ".join(paper) or "not stated", values]
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
        done = mine[mine["status"] == RUN]
        minutes = done.get("metrics.time_total_s", pd.Series(dtype=float)).dropna() / 60
        lines.append(f"| wall minutes a cell | — | {minutes.mean():.1f} (mean of {len(minutes)} cell groups' runs) |"
                     if len(minutes) and not math.isnan(minutes.mean()) else "| wall minutes a cell | — | no run |")
        parts.append("\n".join(lines))
    if not parts:
        return ""
    notes = [f"[{i}] `{source}`  " for i, source in enumerate(sources, 1)]
    return "\n\n".join([*parts, "\n".join(["Sources (results/reference/settings.csv): ", *notes])])
