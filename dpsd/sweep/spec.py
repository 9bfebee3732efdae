"""Sweep specs and cells: pure data (a spec file in, composed cells and their hashes out)."""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import os
import pickle
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf

from dpsd.cell_identity import content_hash, identity_content
from dpsd.config import CONFIG_DIR, check_method_overrides, compose, switch_noise_off
from dpsd.errors import ConfigError

CHECK = "check"
SCALES = (CHECK, "smoke", "laptop", "paper")
"""The scales a spec runs at, smallest first: ``check`` is the pipeline check (``smoke``'s sizes shrunk further by
the shared check list and the spec's own ``check`` list: every code path in the least compute, students near chance
by design); ``smoke``, ``laptop`` and ``paper`` are ``dpsd/conf/scale/<name>.yaml``, as ``dpsd run scale=...``
composes them (an on-demand spec adds its own ``smoke`` list at smoke: its budget)."""
SPEC_KEYS = ("name", "paper", "feeds", "base", "grid", "cells", "seeds", "smoke", "check", "on_demand", "search",
             "directions")
REPO_SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
# The check overrides every spec shares (less the keys a spec varies): the package's ``sweeps/common/check.yaml``,
# wherever the spec lies, unless the spec's folder has a ``common/check.yaml`` of its own (a set of specs that
# shrinks differently).
COMMON_CHECK = Path("common") / "check.yaml"
@dataclass(frozen=True)
class Spec:
    """A sweep spec as written in ``sweeps/<name>.yaml`` (keys: SPEC_KEYS)."""

    name: str
    paper: str | None
    feeds: dict
    base: tuple[str, ...]
    grid: dict[str, tuple]
    cells: tuple[tuple[str, ...], ...]
    seeds: tuple[int, ...]
    # an on-demand spec's own budget, applied at scale=smoke (the ladder's T and b; empty for every other spec)
    smoke: tuple[str, ...]
    path: str | None = None
    # applied at scale=check: the shared check list (less the keys the spec varies), then the spec's own check list
    check: tuple[str, ...] = ()
    check_caps: tuple[tuple[str, float], ...] = ()  # (key, cap): at check scale, cells above a cap are left out
    # an experiment at its own budget (the ladder, the query budget): run when named (``dpsd sweep``,
    # ``dpsd reproduce --only``), never by a bare ``dpsd reproduce``, whose check scale is a pipeline check
    on_demand: bool = False
    search: dict = dataclasses.field(default_factory=dict)  # a study's ranges (dpsd.sweep.study), checked there
    directions: dict = dataclasses.field(default_factory=dict)  # a study's objectives (dpsd.sweep.objectives)


@dataclass(frozen=True)
class Cell:
    """One run of a sweep. ``label`` is the cell's own overrides (grid values or explicit cell, and
    ``seed=``) joined by spaces; ``overrides`` is everything that composes it."""

    spec: str
    label: str
    overrides: tuple[str, ...]
    config_hash: str
    dataset: str = ""
    method: str = ""

    def compose(self) -> DictConfig:
        return composed(self.overrides)


def spec_path(spec: str | os.PathLike) -> Path:
    """A spec file, given as a path or a name under ``./sweeps/`` or the repository's ``sweeps/``."""
    path = Path(spec)
    candidates = [path] if path.suffix in (".yaml", ".yml") else []
    candidates += [Path("sweeps") / f"{spec}.yaml", REPO_SWEEPS / f"{spec}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = ", ".join(sorted(p.stem for p in REPO_SWEEPS.glob("*.yaml"))) or "none"
    raise ConfigError(f"no sweep spec {str(spec)!r}; give a path or one of: {known}")


def _overrides(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(o, str) and "=" in o for o in value):
        raise ConfigError(f"{where} must be a list of key=value overrides, got {value!r}")
    return tuple(value)


def override_key(override: str) -> str:
    """``++method.x=1`` -> ``method.x``; ``model/teacher=small_cnn`` -> ``model/teacher``."""
    return override.split("=", 1)[0].lstrip("+~")


def base_value(spec: Spec, key: str, default: str) -> str:
    """The value ``spec``'s base list sets for ``key`` (``method`` in ``method=dpsd``: ``dpsd``; matched by
    :func:`override_key`, so ``++key=`` counts), ``default`` where it sets none."""
    return next((o.split("=", 1)[1] for o in spec.base if "=" in o and override_key(o) == key), default)


def shared_check_file(spec_file: Path) -> Path:
    """The shared check file a spec gets: its folder's :data:`COMMON_CHECK`, else the package's
    (``sweeps/common/check.yaml``): a study of one's own anywhere on disk is shrunk like the repository's."""
    beside = spec_file.parent / COMMON_CHECK
    return beside if beside.is_file() else REPO_SWEEPS / COMMON_CHECK


def _shared_check(spec_file: Path) -> dict:
    """The shared check file's contents (:func:`shared_check_file`, read as a spec is: a duplicated key is an
    error); {} if there is none."""
    shared = shared_check_file(spec_file)
    return (read_spec_yaml(shared) or {}) if shared.is_file() else {}


def common_check(spec_file: Path) -> tuple[str, ...]:
    """The shared check list (:func:`shared_check_file`); () if there is none."""
    return _overrides(_shared_check(spec_file).get("check"), f"{shared_check_file(spec_file)}: check")


def common_check_caps(spec_file: Path) -> tuple[tuple[str, float], ...]:
    """The shared list's ``caps`` (``key: largest value run at check scale``); () if there are none."""
    shared = shared_check_file(spec_file)
    caps = _shared_check(spec_file).get("caps")
    if caps is None:
        return ()
    if not isinstance(caps, dict) or not all(isinstance(v, (int, float)) for v in caps.values()):
        raise ConfigError(f"{shared}: caps must map override keys to numbers, got {caps!r}")
    return tuple((str(k), float(v)) for k, v in caps.items())


def over_check_cap(spec: Spec, cfg: DictConfig) -> bool:
    """Whether a cell exceeds a shared check cap on a key the spec varies (its grid or cells: an amount
    axis such as teachers or synthetic images); sizes a spec sets for all its cells are not capped."""
    varied = varied_keys(spec)
    return any((value := OmegaConf.select(cfg, key)) is not None and value > cap
               for key, cap in spec.check_caps if key in varied)


_SEED = re.compile(r"^\+{0,2}seed=")


def group_label(label: str) -> str:
    """The cell's label without ``seed=``: the label shared by a cell's seeds."""
    return " ".join(o for o in label.split() if not _SEED.match(o))


def varied_keys(spec: Spec) -> set[str]:
    """The override keys a spec varies: its grid's, and every key its explicit cells set."""
    return set(spec.grid) | {override_key(o) for cell in spec.cells for o in cell}


def check_overrides(spec_file: Path, grid: dict, cells: Sequence[Sequence[str]], own: Sequence[str]) -> tuple[str, ...]:
    """A spec's check overrides: the shared list less every key the cells vary (``grid``, ``cells``)
    or the spec's own ``check`` list sets (a shared value must never collapse the cells a spec
    varies), then the spec's own list. ``base`` keys are not dropped: the shared list is what swaps a
    paper's base teacher for the small CNN."""
    varied = {override_key(o) for o in [*own, *itertools.chain.from_iterable(cells)]} | set(grid)
    return tuple(o for o in common_check(spec_file) if override_key(o) not in varied) + tuple(own)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (PyYAML keeps the last one silently: a spec
    with two ``seeds:`` lines would run the second and read as the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"{node.start_mark.name}, line {key_node.start_mark.line + 1}: key {key!r} is written "
                                  "twice in one mapping; keep one")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_spec_yaml(path: Path) -> Any:
    """A spec file's YAML (:class:`_UniqueKeyLoader`: a duplicated key is a ConfigError). The file is read each time
    and parsed once per distinct content (a page reads each spec many times; keyed by content, not by modification
    time, whose granularity can hide a quick same-size edit); each caller gets its own copy."""
    return copy.deepcopy(_parsed_yaml(str(path), Path(path).read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=256)
def _parsed_yaml(name: str, text: str) -> Any:
    stream = io.StringIO(text)
    stream.name = name  # so that a parse error names the file
    return yaml.load(stream, Loader=_UniqueKeyLoader)


def load_spec(path: str | os.PathLike) -> Spec:
    """Read and check a sweep spec; unknown keys or malformed entries are a ConfigError. Its ``check`` is
    :func:`check_overrides` (the shared list, then the spec's own), with the shared caps; its ``smoke`` is an
    ``on_demand`` spec's own list (an experiment at its own budget at scale=smoke): a spec that is not on demand
    runs at scale=smoke as ``dpsd run scale=smoke`` composes it, so a ``smoke`` list there is an error."""
    path = spec_path(path)
    raw = read_spec_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a sweep spec is a mapping with keys {', '.join(SPEC_KEYS)}")
    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; accepted: {', '.join(SPEC_KEYS)}")
    grid = raw.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError(f"{path}: grid must map override keys to non-empty lists of values")
    cells = tuple(_overrides(c, f"{path}: each entry of cells") for c in raw.get("cells") or [])
    seeds = raw.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"{path}: seeds must be a non-empty list of integers, got {seeds!r}")
    base = _overrides(raw.get("base"), f"{path}: base")
    on_demand = raw.get("on_demand", False)
    if not isinstance(on_demand, bool):
        raise ConfigError(f"{path}: on_demand must be true or false, got {on_demand!r}")
    smoke = _overrides(raw.get("smoke"), f"{path}: smoke")
    if smoke and not on_demand:
        raise ConfigError(f"{path}: smoke is an on-demand spec's own budget at scale=smoke; this spec is not on "
                          "demand, so it runs at scale=smoke as `dpsd run scale=smoke` does: name its pipeline "
                          "check's overrides check (applied at scale=check, after sweeps/common/check.yaml)")
    own = _overrides(raw.get("check"), f"{path}: check")
    return Spec(
        name=str(raw.get("name") or path.stem), paper=raw.get("paper"), feeds=dict(raw.get("feeds") or {}),
        base=base, grid={str(k): tuple(v) for k, v in grid.items()},
        cells=cells, seeds=tuple(seeds), smoke=smoke, path=str(path),
        check=check_overrides(path, grid, cells, own), check_caps=common_check_caps(path),
        on_demand=on_demand, search=dict(raw.get("search") or {}), directions=raw.get("directions") or {},
    )


def _value(value: Any) -> str:
    """A YAML value as a Hydra override value (``true``/``false``/``null`` spelled the way Hydra reads them)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return str(value)


def cell_overrides(spec: Spec) -> list[tuple[str, ...]]:
    """The spec's cells (without seeds): the grid's cartesian product, then the explicit cells."""
    keys = list(spec.grid)
    combos = [] if not keys else [
        tuple(f"{k}={_value(v)}" for k, v in zip(keys, values))
        for values in itertools.product(*(spec.grid[k] for k in keys))
    ]
    if not keys and not spec.cells:
        combos = [()]  # a spec with only base overrides is one cell
    return combos + list(spec.cells)


def split_scale(overrides: Sequence[str], default: str = "smoke",
                accepted: Sequence[str] = SCALES) -> tuple[str, list[str]]:
    """Take ``scale=...`` out of command-line overrides: ``(scale, the rest)``; ``accepted``: the scales a command
    takes (``dpsd reproduce`` also takes ``pages``)."""
    scale, rest = default, []
    for override in overrides:
        if override.startswith("scale="):
            scale = override.partition("=")[2]
        else:
            rest.append(override)
    if scale not in accepted:
        raise ConfigError(f"scale must be one of {', '.join(accepted)}, got {scale!r}")
    return scale, rest


def composed(overrides: Sequence[str]) -> DictConfig:
    """:func:`dpsd.config.compose`'s config for ``overrides``, as a copy the caller may change, at one
    Hydra composition per distinct set of *group* choices in a process.

    ``dpsd reproduce --scale check`` composes 479 cells to plan (and the report composes them again);
    one composition took 140 ms alone on this 2-core machine, while most cells differ only in values
    (``seed=``, ``privacy.epsilon=``). So the group overrides (``method=``, ``privacy=``, ``scale=``, ...)
    are composed by Hydra once and cached, and the value overrides (``key=v``, ``++key=v``, ``~key``) are
    applied to a copy by Hydra's own step for them (``ConfigLoaderImpl._apply_overrides_to_config``,
    which Hydra runs after composing the defaults list), followed by the steps ``compose`` ends with;
    each whole override list is then cached too (planning and the report expand the same cells).
    Each distinct override string is parsed once, the method check runs once per distinct method node and
    method overrides, and the group compositions are kept on disk between processes
    (:func:`composition_cache`): a dry run of every spec went from 57 s to about 27 s under load on 2 cores.
    Anything that fails this way is composed by ``compose`` itself, whose one-line ``ConfigError`` names
    the problem. tests/test_sweep_specs.py checks the two give the same config for every cell of the
    repository's specs; tests/test_reproduce.py that a dry run lists the same cells either way."""
    return pickle.loads(_compose_once(tuple(overrides)))


@functools.lru_cache(maxsize=8192)
def _compose_once(overrides: tuple[str, ...]) -> bytes:
    """The config, pickled (each caller gets its own copy by ``pickle.loads``)."""
    try:
        cfg = _finished(overrides)
    except Exception:  # an error of the caller's overrides: compose's own message
        cfg = compose(list(overrides))
    return pickle.dumps(cfg)


def _finished(overrides: tuple[str, ...]) -> DictConfig:
    parsed = [_parsed(o) for o in overrides]
    groups = tuple(o.input_line for o in parsed if _is_group_choice(o))
    cfg = pickle.loads(_groups_composed(groups))  # a copy
    ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed if not _is_group_choice(o)], cfg)
    OmegaConf.resolve(cfg)  # the rest of dpsd.config.compose
    cfg = switch_noise_off(cfg)
    _check_method_overrides(cfg, overrides)
    return cfg


def _parsed(override: str) -> Override:
    """Hydra's parse of one override (its parser's ``parse_overrides`` parses a list one by one), parsed once per
    distinct string: a sweep's cells repeat their base and scale lists' overrides. An override whose value is a list or
    a dict is handed out as a copy, so that no cell can change another's value."""
    parsed = _parse_once(override)
    return copy.deepcopy(parsed) if isinstance(parsed.value(), (list, dict)) else parsed


@functools.lru_cache(maxsize=8192)
def _parse_once(override: str) -> Override:
    return _PARSER().parse_overrides([override])[0]


_PARSER = functools.cache(OverridesParser.create)


def _check_method_overrides(cfg: DictConfig, overrides: tuple[str, ...]) -> None:
    """:func:`dpsd.config.check_method_overrides`, run once per distinct question: what it reads is the
    method node and the ``method=`` and ``+method.``/``++method.`` overrides (cells that differ in ``seed=`` or
    ``privacy.epsilon=`` ask the same one)."""
    relevant = tuple(o for o in overrides if o.startswith(("method=", "+method.", "++method.")))
    key = (json.dumps(OmegaConf.to_container(cfg.method, resolve=True), sort_keys=True, default=str), relevant)
    if key not in _METHOD_CHECKED:
        check_method_overrides(cfg, overrides)
        _METHOD_CHECKED.add(key)


_METHOD_CHECKED: set[tuple] = set()


def _is_group_choice(override: Override) -> bool:
    """Hydra's own test (``hydra._internal.defaults_list.Overrides``): a config group's name, not a dict."""
    return _is_group(override.key_or_group) and not isinstance(override.value(), dict)


@functools.lru_cache(maxsize=1024)
def _is_group(key: str) -> bool:
    return (CONFIG_DIR / key).is_dir()


@functools.lru_cache(maxsize=1024)
def _groups_composed(groups: tuple[str, ...]) -> bytes:
    """Hydra's composition of the group choices, pickled: a cell's copy is ``pickle.loads``, about a third of
    ``deepcopy``'s time (pickle keeps an OmegaConf node's flags and types). Kept on disk too
    (:func:`composition_cache`): one Hydra composition took 110-200 ms, and every spec at once has about 110
    distinct sets of group choices, so a second ``dpsd reproduce --dry-run`` reads them instead."""
    folder = composition_cache()
    path = folder / f"{hashlib.sha256(json.dumps(groups).encode()).hexdigest()[:32]}.pkl" if folder else None
    if path is not None and path.is_file():
        try:
            stored_groups, blob = pickle.loads(path.read_bytes())
            if stored_groups == list(groups):
                return blob
        except Exception:  # a torn or foreign file: compose again and rewrite it
            pass
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        blob = pickle.dumps(hydra_compose(config_name="config", overrides=list(groups)))
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(pickle.dumps((list(groups), blob)))
            os.replace(partial, path)  # whole or not at all: two processes may write one entry at once
        except OSError:  # a read-only home: the cache is a convenience
            pass
    return blob


CACHE_VARIABLE = "DPSD_COMPOSITION_CACHE"
"""A folder for :func:`composition_cache` (default ``$XDG_CACHE_HOME/dpsd/compositions``, else
``~/.cache/dpsd/compositions``); ``off`` keeps compositions in memory only."""


@functools.lru_cache(maxsize=1)
def composition_cache() -> Path | None:
    """Where Hydra compositions of group choices are kept between processes: a folder named by a fingerprint of
    everything a composition reads (every file of the config tree, by path and content; ``dpsd/config.py``, whose
    schema Hydra merges first; the Hydra, OmegaConf and Python versions) and of ``dpsd/cell_identity.py``, which
    defines the hashes kept beside them (:func:`identity_hash`), so an edit to any of them starts a new folder and no
    stale composition or hash is ever read. None when :data:`CACHE_VARIABLE` is ``off``."""
    chosen = os.environ.get(CACHE_VARIABLE, "")
    if chosen.lower() in ("off", "0", "none"):
        return None
    import hydra
    import omegaconf

    digest = hashlib.sha256()
    for path in sorted(p for p in CONFIG_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(CONFIG_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    for function in (compose, content_hash):  # dpsd/config.py; dpsd/cell_identity.py, which hashes a cell
        digest.update(Path(sys.modules[function.__module__].__file__).read_bytes())
    digest.update(f"{hydra.__version__} {omegaconf.__version__} {sys.version}".encode())
    root = Path(chosen) if chosen else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dpsd" / "compositions"
    return root / digest.hexdigest()[:24]


def with_seeds(spec: Spec, seeds: int | None) -> Spec:
    """``spec`` run at seeds 0..``seeds``-1 (``dpsd sweep --seeds N``) in place of its ``seeds:`` list; None: as it is."""
    if seeds is None:
        return spec
    if seeds < 1:
        raise ConfigError(f"--seeds must be a positive number of seeds, got {seeds}")
    return dataclasses.replace(spec, seeds=tuple(range(seeds)))


def expand_cells(spec: Spec | str | os.PathLike, scale: str = "smoke", overrides: Sequence[str] = ()) -> list[Cell]:
    """Every cell of ``spec`` at ``scale`` with the command-line ``overrides``, in spec order
    (cells of the grid, then explicit cells; seeds innermost). Composition errors are ConfigErrors."""
    return [cell for cell, _ in _expansion(spec, scale, overrides).pickled]


def expand_configs(spec: Spec | str | os.PathLike, scale: str = "smoke",
                   overrides: Sequence[str] = (), *, shared: bool = False) -> list[tuple[Cell, DictConfig]]:
    """:func:`expand_cells` with each cell's composed config. A scale's list of the spec (at smoke an on-demand
    spec's own ``smoke``, at check its ``check``) comes after the cell, less the keys the cell sets: a cell's own
    value beats it (a ladder's budget sets ``++method.queries=400``; its cell ``method.queries=2000`` stays 2,000);
    the command line's come last. At check scale the cells above a shared cap are left out.

    Each call hands out configs of its own (unpickled copies): a caller may change them. ``shared``: instead, the
    process's one read-only config of each cell, for a caller that only reads them (the report expands the same
    specs about 200 times a render, and unpickling the copies was a tenth of its time); a write to one raises
    omegaconf's ``ReadonlyConfigError``."""
    expansion = _expansion(spec, scale, overrides)
    if not shared:
        return [(cell, pickle.loads(cfg)) for cell, cfg in expansion.pickled]
    if expansion.read_only is None:
        expansion.read_only = [(cell, _read_only(pickle.loads(cfg))) for cell, cfg in expansion.pickled]
    return list(expansion.read_only)


def _read_only(cfg: DictConfig) -> DictConfig:
    OmegaConf.set_readonly(cfg, True)
    return cfg


@dataclass
class _Expansion:
    """A spec's cells at one scale and overrides, each with its config pickled (a copy for each caller that may
    change it) and, once a caller asks for them, the process's read-only configs."""

    pickled: list[tuple[Cell, bytes]]
    read_only: list[tuple[Cell, DictConfig]] | None = None


_EXPANDED: dict[tuple[str, str, tuple[str, ...]], _Expansion] = {}


def _expansion(spec: Spec | str | os.PathLike, scale: str, overrides: Sequence[str]) -> _Expansion:
    """:func:`expand_configs`' cells, each with its config pickled, once a process for each spec (by its whole
    content), scale and overrides: rendering every page expands the same specs about 200 times."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    if scale not in SCALES:
        raise ConfigError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    key = (repr(spec), scale, tuple(overrides))
    if key not in _EXPANDED:
        _EXPANDED[key] = _Expansion(_expanded(spec, scale, overrides))
    return _EXPANDED[key]


def _expanded(spec: Spec, scale: str, overrides: Sequence[str]) -> list[tuple[Cell, bytes]]:
    listed = {"smoke": spec.smoke, CHECK: spec.check}.get(scale, ())
    cells = []
    for own in cell_overrides(spec):
        keys = {override_key(o) for o in own}
        extra = [o for o in listed if override_key(o) not in keys]
        for seed in spec.seeds:
            mine = [*own, f"seed={seed}"]
            full = (*spec.base, *mine, f"scale={scale}", *extra, *overrides)
            try:
                cfg = composed(full)
            except ConfigError as err:
                raise ConfigError(f"sweep {spec.name}, cell {' '.join(mine)}: {err}") from None
            if scale == CHECK and over_check_cap(spec, cfg):
                continue
            cells.append((Cell(spec.name, " ".join(mine), full, cell_hash(cfg),
                               str(cfg.dataset.name), str(cfg.method.name)), _compose_once(full)))
    _save_hashes()
    _check_distinct(spec.name, [cell for cell, _ in cells])
    return cells


HASHES = "identity_hashes.json"
"""The file of :func:`cell_hash`'s table in a :func:`composition_cache` folder."""


def cell_hash(cfg: DictConfig) -> str:
    """:func:`dpsd.cell_identity.config_hash` of ``cfg`` by :func:`identity_hash`."""
    return identity_hash(identity_content(cfg))


def identity_hash(content: dict) -> str:
    """:func:`dpsd.cell_identity.content_hash` of ``content`` (an :func:`~dpsd.cell_identity.identity_content`),
    kept on disk beside the compositions (:func:`composition_cache`, whose fingerprint holds
    ``dpsd/cell_identity.py``, where the hash is defined) under the exact content: the sha256 of its pickle, which
    unpickles to that content only, so two configs that differ in any value or type never share an entry (two
    pickles of one content may differ: then it is hashed again). The content leaves out where a run's results and
    data live, so a store of its own (``results_dir=``) or another ``data.root`` finds the same entries. Planning
    every spec hashes about 1,900 cells, most of them the same from one dry run to the next, and the sorted YAML
    dump that config_hash hashes was a fifth of the dry run's time."""
    folder = composition_cache()
    if folder is None:
        return content_hash(content)
    key = hashlib.sha256(pickle.dumps(content, protocol=4)).hexdigest()[:32]
    table = _hash_table(folder)
    if key not in table:
        table[key] = content_hash(content)
        _UNSAVED.add(folder)
    return table[key]


@functools.lru_cache(maxsize=4)
def _hash_table(folder: Path) -> dict[str, str]:
    try:
        table = json.loads((folder / HASHES).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none yet, or a torn or foreign file: hash again
        return {}
    return table if isinstance(table, dict) else {}


_UNSAVED: set[Path] = set()


def _save_hashes() -> None:
    """Write the hashes :func:`cell_hash` added, merged with any another process wrote meanwhile."""
    for folder in sorted(_UNSAVED):
        table = {**_hash_table.__wrapped__(folder), **_hash_table(folder)}
        try:
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f"{HASHES}.{os.getpid()}.tmp"
            partial.write_text(json.dumps(table), encoding="utf-8")
            os.replace(partial, folder / HASHES)  # whole or not at all
        except OSError:  # a read-only home: the cache is a convenience
            pass
    _UNSAVED.clear()


def _check_distinct(name: str, cells: Sequence[Cell]) -> None:
    """Two cells of a spec that compose to one config are one run under two labels (a later override set a key they
    vary): a ConfigError naming both, before anything runs."""
    seen: dict[str, str] = {}
    for cell in cells:
        first = seen.setdefault(cell.config_hash, cell.label)
        if first != cell.label:
            raise ConfigError(f"sweep {name}: cells {first!r} and {cell.label!r} compose to one config "
                              f"({cell.config_hash}): an override after them sets a key they vary")
