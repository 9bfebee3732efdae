"""The numbers the papers report: ``results/reference/papers.csv`` (one row per reported cell).

Columns (sweeps/README.md): ``paper, table, row, method, dataset, architecture, epsilon, delta, metric,
value, source, note``. Values are kept as the text the paper printed (``value_text``) beside their
numeric reading, so a report shows the reported number exactly as published.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from dpsd.errors import ConfigError

COLUMNS = ("paper", "table", "row", "method", "dataset", "architecture", "epsilon", "delta", "metric",
           "value", "source", "note")


def parse_epsilon(text: object) -> float | None:
    """An epsilon as written in the CSV or a config: empty, ``inf`` or missing means non-private (None)."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return None
    text = str(text).strip()
    if text in ("", "inf", "Inf", "infinity", "∞", "None", "nan"):
        return None
    value = float(text)
    return None if math.isinf(value) else value


def load_reference(path: Path) -> pd.DataFrame:
    """Read the reference CSV (all columns as text); an absent file gives an empty table."""
    path = Path(path)
    if not path.is_file():
        return pd.DataFrame(columns=[*COLUMNS, "epsilon_value", "value_number"])
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: missing columns {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    frame = frame.map(str.strip)
    frame["epsilon_value"] = frame["epsilon"].map(parse_epsilon)
    frame["value_number"] = pd.to_numeric(frame["value"], errors="coerce")
    return frame


def rows_for_table(reference: pd.DataFrame, table_id: str) -> pd.DataFrame:
    """The reference rows of one paper table or figure, in the CSV's order."""
    return reference[reference["table"] == table_id].reset_index(drop=True)
