"""sweeps/*.yaml: every spec loads, has the contract's fields, feeds a known reference table, and its
cells compose into valid configs (sweeps/README.md: cell = base + grid combination or explicit cell +
seed, then scale=<s> and, at check scale, the spec's check overrides; at smoke scale, an on-demand spec's smoke
overrides)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from dpsd.config import compose
from dpsd.experiment import resolve_run
from dpsd.data import data_info
from dpsd.errors import ConfigError
from dpsd.methods import METHODS
from dpsd.models import build_classifier
from dpsd.sweep import spec as sweep_spec
from dpsd.sweep.spec import SPEC_KEYS, composed, load_spec, override_key
from dpsd.report.render import KINDS
from dpsd.report.trends import METRICS

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "sweeps").glob("*.yaml"))
REFERENCE = REPO / "results" / "reference" / "papers.csv"
KEYS = set(SPEC_KEYS)
PAPERS = {"dpsd", "dpdfd", "dp_dfd", "dgd", "dafl"}  # dafl: the public anchor (DAFL Table 1)
STUDIES = {"ladder", "query_budget", "readings"}  # kinds of our own studies: every method, no one paper
BENCHMARKS = {"headline", "quickstart", "frontier"}  # tables over several papers: no one paper
# every table, figure and ablation of the papers with an MNIST panel has a spec feeding it
REQUIRED_IDS = ({f"DPSD Table {n}" for n in ("I", "II", "III", "IV", "V", "VI")}
                | {f"DPSD Fig. {n}" for n in (4, 5, 6, 9)}
                | {f"DPDFD Table {n}" for n in range(1, 7)} | {"DPDFD Fig. 2"}
                | {f"DP-DFD Table {n}" for n in ("I", "II", "III")} | {"DP-DFD Fig. 2", "DP-DFD Fig. 3"}
                | {"DGD Fig. 3", "DGD Fig. 8"})
DGD_STUDIES = {"method.queries", "method.num_teachers", "privacy.query_epsilon"}  # query, teacher-number, noise-scale


def load(path: Path) -> dict:
    """The spec as written, with ``check`` the list a cell gets at check scale (the shared list, then the spec's own)
    and ``smoke`` the one it gets at smoke scale (an on-demand spec's own)."""
    spec = yaml.safe_load(path.read_text())
    loaded = load_spec(path)
    return {**spec, "check": list(loaded.check), "smoke": list(loaded.smoke)}


def default_scale(spec: dict) -> str:
    """The scale a spec's cells are sampled at: an on-demand spec's own budget (smoke), else the pipeline check."""
    return "smoke" if spec.get("on_demand") else "check"


def own_cells(spec: dict) -> list[list[str]]:
    """Grid combinations then explicit cells, without seeds (sweeps/README.md); a study's: one trial's, each searched
    key at the low end of its range (its first choice), as a search composes base and the drawn values."""
    grid = spec.get("grid") or {}
    combos = [[f"{k}={v}" for k, v in zip(grid, values)] for values in itertools.product(*grid.values())] if grid else []
    trial = [f"{key}={next(iter(drawn.values()))[0]}" for key, drawn in (spec.get("search") or {}).items()]
    return combos + [list(c) for c in spec.get("cells") or []] or [trial]


def full_overrides(spec: dict, own: list[str], scale: str, seed: int = 0) -> list[str]:
    """The cell's overrides in sweeps/README.md's order; at check (smoke) scale the check (smoke) list less the keys
    the cell sets."""
    keys = {override_key(o) for o in own}
    listed = [o for o in spec.get(scale) or [] if override_key(o) not in keys] if scale in ("check", "smoke") else []
    return [*spec.get("base", []), *own, f"seed={seed}", f"scale={scale}", *listed]


def table_ids(feeds: dict) -> list[str]:
    """``feeds.id``: one reference table, or a list of them (the headline)."""
    return list(feeds["id"]) if isinstance(feeds["id"], list) else [feeds["id"]]


def method_of(spec: dict, own: list[str]) -> str:
    name = "dpsd"  # config.yaml's default method
    for override in [*spec.get("base", []), *own]:
        if override.startswith("method="):
            name = override.split("=", 1)[1]
    return name


def test_there_are_specs_for_every_table_and_figure():
    ids = {table for p in SPECS for table in table_ids(load(p)["feeds"])}
    assert REQUIRED_IDS <= ids, REQUIRED_IDS - ids
    studied = {load(p)["feeds"].get("x") for p in SPECS if load(p).get("paper") == "dgd"}
    assert DGD_STUDIES <= studied


def own_study(feeds: dict) -> bool:
    """A study of one's own (sweeps/README.md): it feeds no paper's numbers (``reference: none``)."""
    return feeds.get("reference") == "none"


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_spec_fields(path):
    check_fields(path)


def check_fields(path: Path) -> None:
    spec = load(path)
    assert set(spec) <= KEYS, set(spec) - KEYS
    assert spec["name"] == path.stem
    assert spec.get("paper") in PAPERS or spec.get("paper") is None and (
        spec["feeds"]["kind"] in STUDIES or spec["name"] in BENCHMARKS or own_study(spec["feeds"]))
    feeds = spec["feeds"]
    assert feeds["kind"] in KINDS and feeds["id"] and feeds["title"]
    if feeds["kind"] in ("curve", "sensitivity"):
        assert feeds.get("x"), "a curve or sensitivity plot names its x override key"
    assert set(feeds.get("metrics", [])) <= set(METRICS), "feeds.metrics names run metrics the report knows"
    for field in ("base", "check", "smoke"):
        overrides = spec.get(field) or []
        assert isinstance(overrides, list) and all(isinstance(o, str) and "=" in o for o in overrides), field
    grid = spec.get("grid") or {}
    assert all(isinstance(v, list) and v for v in grid.values())
    assert all(isinstance(c, list) and all("=" in o for o in c) for c in spec.get("cells") or [])
    assert grid or spec.get("cells") or spec.get("search"), "a spec names its cells (or a study its ranges)"
    if feeds["kind"] in ("curve", "sensitivity"):
        keys = set(grid) | {o.split("=", 1)[0] for c in spec.get("cells") or [] for o in c}
        assert feeds["x"] in keys, "the x axis is an override the cells vary"
    labels = [" ".join(c) for c in own_cells(spec)]
    assert len(labels) == len(set(labels)), "duplicate cells"
    assert all(isinstance(s, int) for s in spec.get("seeds", [0]))
    assert spec.get("on_demand") or not spec["smoke"], "a smoke list is an on-demand spec's budget"


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_feeds_a_reference_table_or_says_none(path):
    check_feeds(path)


def check_feeds(path: Path) -> None:
    feeds = load(path)["feeds"]
    tables = set(pd.read_csv(REFERENCE, dtype=str, keep_default_na=False)["table"])
    assert set(table_ids(feeds)) <= tables or feeds.get("reference") == "none", feeds["id"]


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_the_shared_check_list_never_overrides_what_the_cells_vary(path):
    check_shared(path)


def check_shared(path: Path) -> None:
    """A shared check override of a varied key would collapse the cells into one config: the loader leaves such keys
    out of the shared list (a spec's own list may set one for the cells that do not: a cell's own value wins)."""
    spec = load(path)
    varied = set(spec.get("grid") or {}) | {override_key(o) for c in spec.get("cells") or [] for o in c}
    own = set(yaml.safe_load(path.read_text()).get("check") or [])
    shared_keys = {override_key(o) for o in spec.get("check") or [] if o not in own}
    assert not varied & shared_keys, varied & shared_keys


def _sample(specs: list[dict]) -> list[tuple[dict, list[str]]]:
    """Each spec's last cell (it carries the spec's grid keys), plus the first cell of every
    (method, privacy mode) not met before: about one composition per spec, enough to catch a bad key."""
    seen, picked = set(), []
    for spec in specs:
        cells = own_cells(spec)
        for own in cells[:-1]:
            mode = next((o for o in [*spec.get("base", []), *own][::-1] if o.startswith("privacy=")), "")
            if (method_of(spec, own), mode) not in seen:
                seen.add((method_of(spec, own), mode))
                picked.append((spec, own))
        picked.append((spec, cells[-1]))
    return picked


def _check_cells(cells: list[tuple[dict, list[str]]], scales=(None,)):
    """Each cell composed at ``scales`` (None: the spec's :func:`default_scale`)."""
    registered, skipped = set(METHODS.names()), []
    for spec, own in cells:
        method = method_of(spec, own)
        if method not in registered:
            skipped.append(f"{spec['name']}: {method}")
            continue
        for scale in (scale or default_scale(spec) for scale in scales):
            cfg = compose(full_overrides(spec, own, scale))
            resolve_run(cfg)
            # the sweep's composition (one Hydra call per set of group choices) gives compose's config
            assert OmegaConf.to_container(composed(full_overrides(spec, own, scale))) == OmegaConf.to_container(cfg)
            assert cfg.method.name == method and cfg.scale.name == scale
            info = data_info(cfg)  # the networks take the cell's inputs (a LeNet only 32x32: caught before a run)
            for arch in {cfg.model.teacher.arch, cfg.model.student.arch}:
                build_classifier(arch, info.channels, info.image_size, info.num_classes)
            for override in own:  # the cell's own values reach the config
                key, value = override.split("=", 1)
                if "/" not in key and key not in ("method", "privacy", "dataset") and not key.startswith("+"):
                    got = _get(cfg, key)
                    got = str(got).lower() if isinstance(got, bool) else str(got)  # YAML's true, not Python's True
                    assert got in (value, str(float(value)) if _is_float(value) else value), override
    if skipped:
        pytest.skip(f"methods not registered yet: {sorted(set(skipped))}")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _get(cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def test_sampled_cells_compose_and_validate():
    """Composition costs about 0.2 s of CPU a cell: a sample here (about 50), every cell in the slow test."""
    _check_cells(_sample([load(p) for p in SPECS]))


@pytest.mark.slow
def test_every_cell_composes_at_both_scales():
    _check_cells([(load(p), own) for p in SPECS for own in own_cells(load(p))], scales=(None, "paper"))


def test_cells_that_differ_only_in_values_share_one_hydra_composition():
    sweep_spec._groups_composed.cache_clear()
    first = composed(["method=dgd", "dataset=mnist", "seed=0", "privacy.query_epsilon=1"])
    second = composed(["method=dgd", "dataset=mnist", "seed=1", "++method.member_steps=7"])
    assert sweep_spec._groups_composed.cache_info().currsize == 1
    assert (first.seed, second.seed, first.privacy.query_epsilon, second.method.member_steps) == (0, 1, 1.0, 7)
    first.seed = 5  # a copy: the cached composition is untouched
    assert composed(["method=dgd", "dataset=mnist", "seed=0"]).seed == 0


@pytest.mark.parametrize("overrides, message", [
    (["method=nope"], "unknown method 'nope'; known: "),
    (["privacy=none", "privacy.noiseless=true"], "privacy.noiseless=true keeps a mechanism's structure"),
    (["method.no_such_key=1"], "Could not override 'method.no_such_key'"),
])
def test_a_bad_override_gets_compose_s_one_line_error(overrides, message):
    with pytest.raises(ConfigError) as caught:
        composed(overrides)
    with pytest.raises(ConfigError) as direct:
        compose(overrides)
    assert message in str(caught.value) and str(caught.value) == str(direct.value)
    assert "\n" not in str(caught.value)


def test_a_check_cell_differs_from_its_smoke_and_paper_cells():
    """scale=check is the pipeline check (the shared check list: the small CNN, 10 iterations of 32); scale=smoke is
    the smoke scale as `dpsd run scale=smoke` composes it (DPSD at 400 iterations of 128, the spec's own teacher)."""
    spec = load(REPO / "sweeps" / "dpsd_table1.yaml")
    own = own_cells(spec)[0]
    check, smoke, paper = (compose(full_overrides(spec, own, s)) for s in ("check", "smoke", "paper"))
    assert paper.model.teacher.arch == "resnet34" and check.model.teacher.arch == "small_cnn"
    assert paper.method.iterations == 200 and (check.method.iterations, check.method.batch_size) == (10, 32)
    assert (smoke.method.iterations, smoke.method.batch_size) == (400, 128)
    assert smoke == compose([*spec["base"], *own, "seed=0", "scale=smoke"])
    assert check.privacy.epsilon == paper.privacy.epsilon == 1 and check.privacy.calibrate == "claimed"
    assert (check.scale.name, smoke.scale.name) == ("check", "smoke")


STUDY = {"name": "label_rr_study", "paper": None, "seeds": [0, 1],
         "feeds": {"kind": "table", "id": "label RR against LP-1ST", "title": "a study of one's own", "reference": "none"},
         "base": ["dataset=digits", "privacy=label"], "grid": {"method": ["lp1st", "teacher"], "privacy.epsilon": [1, 10]}}


def test_a_study_of_ones_own_outside_sweeps_passes_the_spec_checks(tmp_path):
    """`paper: null` with `reference: none`, anywhere on disk, passes every check the
    repository's specs pass, and gets the package's shared check list (not a common/ beside it)."""
    path = tmp_path / "elsewhere" / "label_rr_study.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(STUDY))
    check_fields(path)
    check_feeds(path)
    check_shared(path)
    _check_cells([(load(path), own) for own in own_cells(load(path))], scales=("check", "smoke", "paper"))
    assert "model.teacher.recipe.steps=200" in load(path)["check"]
    assert load(path)["check"] == list(sweep_spec.common_check(REPO / "sweeps" / "any.yaml"))
    with pytest.raises(AssertionError):  # a paper: null that feeds a paper's numbers is still refused
        bad = tmp_path / "elsewhere" / "bad.yaml"
        bad.write_text(yaml.safe_dump({**STUDY, "name": "bad", "feeds": {**STUDY["feeds"], "reference": "papers"}}))
        check_fields(bad)


def test_a_spec_with_a_key_written_twice_is_refused_in_one_line(tmp_path):
    """PyYAML keeps the last of two equal keys silently; a spec that says ``seeds`` twice is an error naming the line."""
    spec = tmp_path / "twice.yaml"
    spec.write_text("name: twice\nseeds: [0]\nseeds: [0, 1, 2]\ngrid: {seed: [0]}\n")
    with pytest.raises(ConfigError, match=r"twice\.yaml, line 3: key 'seeds' is written twice"):
        load_spec(spec)


def test_a_spec_file_edited_at_once_is_read_anew_and_each_reader_gets_its_own_copy(tmp_path):
    """Spec files are parsed once per content: an edit of the same size right after a read (within the file system's
    timestamp granularity) is still seen, a reader changing what it got changes nobody else's, and a parse error
    still names the file."""
    from dpsd.sweep.spec import read_spec_yaml

    path = tmp_path / "edited.yaml"
    path.write_text("seeds: [1]\n")
    first = read_spec_yaml(path)
    path.write_text("seeds: [2]\n")
    assert first == {"seeds": [1]} and read_spec_yaml(path) == {"seeds": [2]}
    read_spec_yaml(path)["seeds"].append(3)
    assert read_spec_yaml(path) == {"seeds": [2]}
    path.write_text("seeds: [1]\nseeds: [2]\n")
    with pytest.raises(ConfigError, match="edited.yaml"):
        read_spec_yaml(path)
