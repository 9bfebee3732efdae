"""results/reference/papers.csv: its schema, and cells re-derived from the paper texts.

The spot checks never compare the CSV with a copy of itself: each one opens the paper file, finds the
table's line (or the sentence) and reads the value from the text, then looks the cell up in the CSV.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from dpsd.data import DATASETS
from dpsd.methods import METHODS

REPO = Path(__file__).resolve().parents[1]
CSV = REPO / "results" / "reference" / "papers.csv"
PAPERS_DIR = REPO.parent / "shared" / "papers"
COLUMNS = ["paper", "table", "row", "method", "dataset", "architecture", "epsilon", "delta", "metric", "value",
           "source", "note"]
PAPERS = {  # paper key -> (file, prefix of its `table` labels, prints accuracies as fractions)
    "dpsd": ("dpsd-model-transcription.txt", "DPSD ", False),
    "dpdfd": ("dpdfd-ijcai2023.md", "DPDFD ", True),
    "dp_dfd": ("dp-dfd-selective-randomized-response.md", "DP-DFD ", True),
    "dgd": ("dgd-discriminative-generative-distillation.excerpts.json", "DGD ", False),
}
# Public anchors (DESIGN.md "Anchors before verdicts"): paper key -> (source prefix, table prefix). DAFL's paper is
# not in ../shared/papers; its Table 1 is the image its authors' repository carries.
ANCHORS = {"dafl": ("huawei-noah/Data-Efficient-Model-Compression DAFL/figure/Table1.jpg", "DAFL ")}
# Methods planned for the harness, some still being built; the registry's names are accepted too.
PLANNED_METHODS = {"dpsd", "dpsd_t", "dpdfd", "dpdfd_direct", "dp_dfd", "fed_dpsd", "dgd", "dgd_plus", "dpsgd", "pate",
                   "lp1st", "dfkd", "teacher"}
METRICS = {"accuracy", "synthetic_data_at_convergence", "wall_time_min", "norm_bound_crossover",
           "noise_scale_choice", "epsilon_1", "eps_claimed", "eps_moments_accountant"}
EXTRA_DATASETS = {"svhn"}  # DGD Fig. 7 only; not a harness dataset


@pytest.fixture(scope="module")
def ref() -> pd.DataFrame:
    return pd.read_csv(CSV, dtype=str, keep_default_na=False)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_columns_and_types(ref):
    assert list(ref.columns) == COLUMNS
    assert len(ref) > 400
    for col in ("paper", "table", "row", "metric", "value", "source"):
        assert (ref[col] != "").all(), f"empty {col}"
    for col in ("epsilon", "delta"):
        bad = ref[(ref[col] != "") & ~ref[col].map(_is_number)]
        assert bad.empty, bad[[col, "table", "row"]]
    assert ref["value"].map(_is_number).all()
    assert set(ref["metric"]) <= METRICS
    acc = ref[ref.metric == "accuracy"]["value"].astype(float)
    assert acc.between(0, 100).all(), "accuracy is stored in percent"
    assert (ref[ref.epsilon != ""]["epsilon"].astype(float) > 0).all()


def test_keys_names_and_sources(ref):
    assert set(ref["paper"]) == set(PAPERS) | set(ANCHORS)
    for paper, (source, prefix) in ANCHORS.items():
        rows = ref[ref.paper == paper]
        assert rows["table"].str.startswith(prefix).all() and rows["source"].str.startswith(source + ":").all(), paper
    for paper, (fname, prefix, _) in PAPERS.items():
        rows = ref[ref.paper == paper]
        assert rows["table"].str.startswith(prefix).all(), paper
        assert rows["source"].str.startswith(fname + ":").all(), paper
    methods = set(ref["method"]) - {""}
    assert methods <= PLANNED_METHODS | set(METHODS.names()), methods - PLANNED_METHODS
    assert set(ref["dataset"]) - {""} <= set(DATASETS.names()) | EXTRA_DATASETS
    key = ["table", "row", "dataset", "epsilon", "metric"]
    dup = ref[ref.duplicated(key, keep=False)]
    assert dup.empty, dup[key]


def test_switch_notes_are_override_lists(ref):
    switch = ref[ref.note.str.startswith("switch:")]
    assert len(switch) > 40
    for note in switch["note"]:
        overrides = note[len("switch:"):].split(";")[0].split()
        assert overrides and all(re.fullmatch(r"[\w./]+=[\w.\-]+", o) for o in overrides), note


def test_known_contradictions_are_flagged(ref):
    # papers/README.md: DPSD Table IV's CelebA columns hold DP-DFD's CIFAR numbers
    celeba = ref[(ref.table == "DPSD Table IV") & ref.dataset.str.startswith("celeba")]
    assert len(celeba) >= 10 and celeba["note"].str.contains("CONTRADICTION").all()
    # the same cell in two papers with two values: both rows say so
    aliases = {"DP-Sinkhorn": "DPSH", "Baseline": "Teacher", "DPSD (data)": "DPSD"}
    # (an anchor's rows are of its own networks: DAFL's LeNet-5 teacher is not the papers' teacher)
    acc = ref[(ref.metric == "accuracy") & ~ref.paper.isin(ANCHORS)].assign(r=lambda d: d["row"].map(lambda r: aliases.get(r, r)))
    conflicts = 0
    for _, group in acc.groupby(["r", "dataset", "epsilon"]):
        if group["table"].nunique() > 1 and group["value"].astype(float).nunique() > 1:
            conflicts += 1
            assert group["note"].str.contains("CONTRADICTION").all(), group[["table", "row", "value"]]
    assert conflicts >= 5  # DGD MNIST eps=1 and DP-MERF on four cells


# --- spot checks against the paper texts ---------------------------------------------------------------

# Table cells: (paper, table, csv row, dataset, epsilon, anchor line, line prefix, line offset, how, index, sub)
#   the line is the first one at or after the anchor that starts with the prefix, moved by the offset;
#   how="num": the index-th decimal number on the line; how="cell": the index-th tab-separated cell,
#   split on spaces and the sub-th part taken.
T = "TABLE {}: Test accuracy (%) comparisons"
CELLS = [
    ("dpsd", "DPSD Table I", "DPSD (data)", "mnist", "1", T.format("I"), "Our DPSD", 0, "num", 0, 0),
    ("dpsd", "DPSD Table I", "DPDFD", "celeba_hair", "10", T.format("I"), "DPDFD [48]", 0, "num", 7, 0),
    ("dpsd", "DPSD Table I", "DGD", "mnist", "10", T.format("I"), "DGD [28]", 0, "num", 1, 0),
    ("dpsd", "DPSD Table I", "Teacher", "fmnist", "", T.format("I"), "Teacher Private", 0, "num", 1, 0),
    ("dpsd", "DPSD Table I", "G-PATE", "celeba_gender", "1", T.format("I"), "G-PATE", 0, "num", 4, 0),
    ("dpsd", "DPSD Table II", "DPSD (data)", "covidx", "1", T.format("II"), "Our DPSD", 0, "num", 2, 0),
    ("dpsd", "DPSD Table III", "Spectral-DP", "cifar10", "3", T.format("III"), "Spectral-DP", 0, "num", 3, 0),
    ("dpsd", "DPSD Table IV", "DPSD (label)", "celeba_gender", "8", T.format("IV"), "Our DPSD", 0, "num", 5, 0),
    ("dpsd", "DPSD Table IV", "LP-2ST", "celeba_hair", "2", T.format("IV"), "LP-2ST", 0, "num", 3, 0),
    ("dpsd", "DPSD Table V", "FedDPSD", "imagenet", "10", T.format("V"), "Our FedDPSD", 0, "num", 3, 0),
    ("dpsd", "DPSD Table V", "DENSE", "mnist", "", T.format("V"), "DENSE", 0, "num", 0, 0),
    ("dpsd", "DPSD Table VI", "DPSD (L) w/o NORM", "fmnist", "10", "TABLE VI:", "FMNIST", 3, "num", 1, 0),
    ("dpsd", "DPSD Table VI", "DPSD (D) w/o IE", "mnist", "10", "TABLE VI:", "MNIST", 2, "num", 0, 0),
    ("dpdfd", "DPDFD Table 1", "DPDFD", "mnist", "1", "Dataset\tTeacher", "MNIST\t", 0, "cell", 12, 0),
    ("dpdfd", "DPDFD Table 1", "DPGEN", "celeba_hair", "10", "Dataset\tTeacher", "CelebA-H\t", 1, "cell", 11, 0),
    ("dpdfd", "DPDFD Table 1", "Teacher", "celeba_gender", "", "Dataset\tTeacher", "CelebA-G\t", 0, "cell", 1, 0),
    ("dpdfd", "DPDFD Table 2", "DGD", "mnist", "1", "Approach\t", "DGD\t", 0, "cell", 2, 0),
    ("dpdfd", "DPDFD Table 3", "DPDFD (ShuffleNet teacher)", "imagenet", "1", "Networks\t", "ShuffleNet", 0, "cell", 2, 0),
    ("dpdfd", "DPDFD Table 3", "Teacher ViT", "imagenet", "", "Networks\t", "ViT\t", 0, "cell", 1, 0),
    ("dpdfd", "DPDFD Table 4", "DPDFD (direct)", "cifar10", "8", "Dataset\t$\\epsilon$\tDPSGD", "\t8.0", 0, "cell", 5, 0),
    ("dpdfd", "DPDFD Table 5", "DPDFD (sigma=200)", "fmnist", "", "Dataset\t$\\sigma$", "<b>FMNIST", 0, "cell", 4, 0),
    ("dpdfd", "DPDFD Table 6", "DPDFD w/o IE", "fmnist", "10", "Dataset\tCE\tIE\tNorm", "<b>FMNIST", 2, "cell", 4, 0),
    ("dp_dfd", "DP-DFD Table I", "DP-DFD", "celeba_gender", "10", "Dataset\tBaseline", "CelebA-G\t", 0, "cell", 10, 1),
    ("dp_dfd", "DP-DFD Table I", "Baseline", "celeba_hair", "", "Dataset\tBaseline", "CelebA-H\t", 0, "cell", 1, 0),
    ("dp_dfd", "DP-DFD Table I", "DP-Sinkhorn", "fmnist", "10", "Dataset\tBaseline", "FMNIST\t", 0, "cell", 9, 1),
    ("dp_dfd", "DP-DFD Table II", "DP-DFD", "cifar100", "8", "Dataset\t$ \\varepsilon $\tLP-2ST", "CIFAR100\t", 0, "cell", 6, 1),
    ("dp_dfd", "DP-DFD Table II", "ClusterRR", "cifar10", "1", "Dataset\t$ \\varepsilon $\tLP-2ST", "CIFAR10\t", 0, "cell", 4, 0),
    ("dp_dfd", "DP-DFD Table III", "DP-DFD w/o IE", "mnist", "10", "Dataset\tCE\tIE\tNorm", "", 3, "cell", 4, 0),
]
# Numbers stated in running text: (paper, table, csv row, dataset, epsilon, regex with one group)
SENTENCES = [
    ("dpsd", "DPSD Fig. 4", "DPSD (ShuffleNet teacher)", "imagenet", "1", r"delivers the highest accuracy of (\d+\.\d+)%"),
    ("dpsd", "DPSD Fig. 9", "DPSD (data)", "fmnist", "0.1", r"and (\d+\.\d+)% on FMNIST under"),
    ("dpsd", "DPSD §IV-F.3", "DPSD-T", "mnist", "", r"\d+\.\d+% vs\. (\d+\.\d+)% on MNIST"),
    ("dgd", "DGD Fig. 3", "DGD (750 queries)", "mnist", "", r"750\) can lead to an impressive accuracy of (\d+\.\d+)%"),
    ("dgd", "DGD Fig. 9", "DGD", "mnist", "10", r"delivering a high accuracy of (\d+\.\d+)%"),
    ("dgd", "DGD Fig. 7", "DGD+", "svhn", "", r"accuracy of (\d+\.\d+)% on SVHN"),
]
_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])")


def _paper_text(paper: str) -> str:
    path = PAPERS_DIR / PAPERS[paper][0]
    if not path.exists():
        pytest.skip(f"paper text {path} is absent (the checks read ../shared/papers next to the repository)")
    text = path.read_text().replace("\xa0", " ")
    if path.suffix == ".json":  # DGD: no full text, only captions and the passages that cite them
        text = "\n".join(" ".join(ref.split()) for entry in json.loads(text).values() for ref in entry["references"])
    return text


def _cell(ref, table, row, dataset, epsilon) -> float:
    hit = ref[(ref.table == table) & (ref.row == row) & (ref.dataset == dataset) & (ref.epsilon == epsilon)
              & (ref.metric == "accuracy")]
    assert len(hit) == 1, f"{table} / {row} / {dataset} / eps={epsilon}: {len(hit)} rows in papers.csv"
    return float(hit["value"].iloc[0])


def _text_value(paper, anchor, prefix, offset, how, index, sub) -> float:
    lines = _paper_text(paper).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(anchor))
    at = next(i for i in range(start, len(lines)) if lines[i].startswith(prefix)) + offset
    line = re.sub(r"</?b>", "", lines[at])
    printed = _DECIMAL.findall(line)[index] if how == "num" else line.split("\t")[index].split()[sub]
    value = float(printed)
    return round(value * 100, 2) if PAPERS[paper][2] else value


def test_the_dafl_anchor_rows_are_the_numbers_design_md_quotes(ref):
    """DAFL Table 1's LeNet-5 column as ../shared/DESIGN.md quotes it (a second source beside the table image)."""
    design = REPO.parent / "shared" / "DESIGN.md"
    if not design.exists():
        pytest.skip(f"{design} is absent")
    text = " ".join(design.read_text().split())
    quoted = re.search(r"LeNet-5 teacher (\d+\.\d+)%, KD on N\(0, 1\) noise (\d+\.\d+)%, DAFL (\d+\.\d+)%", text)
    assert quoted, "DESIGN.md no longer quotes DAFL's Table 1"
    for row, value in zip(("Teacher", "Normal distribution", "Data-Free Learning (DAFL)"), quoted.groups()):
        assert _cell(ref, "DAFL Table 1", row, "mnist", "") == float(value), row


def test_at_least_twenty_checks_over_all_four_papers():
    checked = [c[0] for c in CELLS] + [s[0] for s in SENTENCES]
    assert len(checked) >= 20 and set(checked) == set(PAPERS)


@pytest.mark.parametrize("check", CELLS, ids=[f"{c[1]}|{c[2]}|{c[3]}|{c[4]}" for c in CELLS])
def test_table_cell_matches_the_paper(ref, check):
    paper, table, row, dataset, epsilon, *where = check
    assert _cell(ref, table, row, dataset, epsilon) == _text_value(paper, *where)


@pytest.mark.parametrize("check", SENTENCES, ids=[f"{s[1]}|{s[2]}|{s[3]}" for s in SENTENCES])
def test_number_stated_in_the_text_matches(ref, check):
    paper, table, row, dataset, epsilon, pattern = check
    match = re.search(pattern, _paper_text(paper))
    assert match, pattern
    assert _cell(ref, table, row, dataset, epsilon) == float(match.group(1))


@pytest.mark.parametrize("row, metric, pattern", [
    ("DGD budget, 400 queries (advanced composition)", "eps_claimed", r"much higher privacy budget of (\d+\.\d+) under"),
    ("DGD budget, 1000 queries (advanced composition)", "eps_claimed", r"privacy budget of (\d+\.\d+) with advanced"),
    ("DGD budget, 1000 queries (moments accountant)", "eps_moments_accountant",
     r"or (\d+\.\d+) with moments accountant under 1000 queries"),
])
def test_the_privacy_budgets_dgd_states_for_fig_8_match_its_text(ref, row, metric, pattern):
    match = re.search(pattern, _paper_text("dgd"))
    assert match, pattern
    hit = ref[(ref.table == "DGD Fig. 8") & (ref.row == row) & (ref.metric == metric)]
    assert len(hit) == 1 and float(hit["value"].iloc[0]) == float(match.group(1))


def test_every_csv_value_appears_on_its_source_line(ref):
    """Beyond the spot checks: the printed number of every table row is on the line its source names."""
    for paper, (fname, _, frac) in PAPERS.items():
        if paper == "dgd":
            continue
        lines = _paper_text(paper).splitlines()
        rows = ref[(ref.paper == paper) & (ref.metric == "accuracy") & ref.source.str.match(rf"{re.escape(fname)}:\d+ ")]
        assert len(rows) > 10
        for _, r in rows.iterrows():
            line = lines[int(r.source.split(":")[1].split()[0]) - 1]
            printed = f"{float(r.value) / 100:.4f}" if frac else r.value
            assert printed in line, (r.table, r.row, r.dataset, r.epsilon, printed)
