"""Typed configuration: the Hydra schema, composition from command-line overrides, and validation.

``compose(overrides)`` turns ``["dataset=mnist", "privacy.epsilon=1"]`` into a resolved, typed
``DictConfig``; ``validate(cfg, info)`` stops a bad setting before any training with one line that names
the problem and the accepted values (a method's own settings: :func:`dpsd.experiment.resolve_run`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Optional, get_type_hints

import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpsd.data import DataInfo
from dpsd.errors import ConfigError
from dpsd.methods import METHODS
from dpsd.models.teachers import STEMS, TORCHVISION_FAMILIES

CONFIG_DIR = Path(__file__).resolve().parent / "conf"


@dataclass
class DataConfig:
    root: Optional[str] = None
    download: bool = False


@dataclass
class DatasetConfig:
    name: str = "digits"
    topk: int = 3
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class PrivacyConfig:
    mode: str = "label"
    delta: float = 1e-5
    epsilon: Optional[float] = None
    query_epsilon: Optional[float] = None
    calibrate: str = "off"
    k: Optional[int] = None
    rr_domain: str = "topk"
    rr_prior: str = "topk"  # label mode: topk (DPSD Eq. (5)) | rr_with_prior (Ghazi et al. 2021 Alg. 2, a labelled variant)
    sigma: Optional[float] = None
    beta: Optional[float] = None
    stability: float = 1e-4
    normalize_over: str = "sample"
    gradient_topk: str = "magnitude"
    bound: str = "normalize"  # data mode: normalize | clip (DPDFD Fig. 2)
    noise_over: str = "sample"  # data mode: sample | batch (DPDFD Alg. 1 line 9)
    noiseless: bool = False  # the ladder's R4: the mechanism's noise off, its structure kept (switch_noise_off)


@dataclass
class TrackingConfig:
    uri: Optional[str] = None
    experiment: str = "dpsd"
    artifact_location: Optional[str] = None
    enabled: bool = True
    parent_run_id: Optional[str] = None  # set by `dpsd sweep`: the sweep's parent MLflow run
    run_id: Optional[str] = None  # set by `dpsd sweep`: the cell's claim run, which the result is logged into
    tags: dict[str, str] = field(default_factory=dict)  # extra run tags (sweep, cell, config_hash, ...)
    check_timeout: float = 3.0  # seconds a tracking server has to answer before anything trains
    http_retries: int = 2  # MLflow's retries of a failed request (its own default, 7, waits ~4 min)


@dataclass
class CheckpointConfig:
    every_steps: int = 0  # save a resumable run's state every N steps and resume a killed run from it (0: off)
    dir: Optional[str] = None  # where checkpoints go; None: <results_dir>/checkpoints


@dataclass
class ScaleConfig:
    name: str = "smoke"


@dataclass
class RunConfig:
    seed: int = 0
    device: str = "auto"
    results_dir: str = "results"
    data: DataConfig = field(default_factory=DataConfig)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    model: Any = None
    method: Any = None


ConfigStore.instance().store(name="base_config", node=RunConfig)

PRIVACY_MODES = ("label", "data", "none")
CALIBRATIONS = ("claimed", "rigorous", "off")
RR_PRIORS = ("topk", "rr_with_prior")
_UNKNOWN_OPTION = re.compile(r"Could not find '([\w/]+)/(\w+)'")


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def compose(overrides: list[str] | tuple[str, ...] = (), strict: bool = False) -> DictConfig:
    """Compose the config tree with command-line style overrides; errors become one line. ``strict`` (one run,
    ``dpsd run``): a method key added with ``+``/``++`` must be one the chosen method declares
    (:func:`check_method_overrides`)."""
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
        OmegaConf.resolve(cfg)
        cfg = switch_noise_off(cfg)
    except MissingConfigException as err:
        match = _UNKNOWN_OPTION.search(str(err))
        if match:
            group, option = match.groups()
            raise ConfigError(
                f"unknown {group} {option!r}; known: {', '.join(_group_options(group))}"
            ) from None
        raise ConfigError(str(err).splitlines()[0]) from None
    except (ConfigCompositionException, OmegaConfBaseException) as err:
        raise ConfigError(" ".join(str(err).split())) from None
    check_method_overrides(cfg, overrides, strict)
    return cfg


def check_method_overrides(cfg: DictConfig, overrides: list[str] | tuple[str, ...], strict: bool = False) -> None:
    """:func:`check_method_node` for ``cfg`` composed from ``overrides``: the ``method=`` file they
    chose, and the method keys they add with ``+``/``++``. An added key the chosen method does not declare is
    refused in one line, unless (``strict`` off: a sweep's shared list, which sizes every method at once) it is
    added with ``++`` and another registered method declares it: a typo (``+method.epochz=3``) is never ignored."""
    chosen = [o.split("=", 1)[1] for o in overrides if re.fullmatch(r"method=\w+", o)]
    option = chosen[-1] if chosen else cfg.method.name
    added = {o.split("=", 1)[0].lstrip("+")[len("method."):]: o.startswith("++")
             for o in overrides if re.match(r"\+\+?method\.", o)}
    check_method_node(cfg, option, set(added))
    own = _field_keys(_registered(cfg.method.name, option).config)
    for key, doubled in sorted(added.items()):
        if key in own or (doubled and not strict and key in _declared_by_any_method()):
            continue
        raise ConfigError(f"method.{key}: method {cfg.method.name!r} has no such setting, so the override would be "
                          f"ignored; its settings: {', '.join(sorted(own))}")


@functools.lru_cache(maxsize=1)
def _declared_by_any_method() -> frozenset[str]:
    """Every method key some registered method declares (what a sweep's shared ``++method.`` list may set)."""
    return frozenset(key for name in METHODS.names() for key in _field_keys(METHODS.get(name).config))


def _registered(name: str, option: str):
    """The method class registered as ``name`` (the ``name:`` of ``conf/method/<option>.yaml``), or
    one line saying which of the two is wrong: the YAML's ``name:`` or a module never imported."""
    if name in METHODS:
        return METHODS.get(name)
    if name != option:
        raise ConfigError(f"conf/method/{option}.yaml sets name: {name}, which no method registers; the name: "
                          f"field must equal the file name and the @register_method name ({option!r})")
    raise ConfigError(f"method {name!r} is not registered: import its module in dpsd/methods/__init__.py (core) or "
                      f"baselines/__init__.py (adapter), and check its @register_method({name!r}); known: "
                      f"{', '.join(METHODS.names())}")


def check_method_node(cfg: DictConfig, option: str | None = None, added: set[str] = frozenset()) -> None:
    """The method node against its method's dataclass (:class:`dpsd.methods.base.MethodConfig`):
    a switch outside its Enum or a value of the wrong type is one line naming what is accepted; a
    field the YAML does not set, or a key the YAML (or a ``method_scale`` file) sets that the
    dataclass does not declare, is one line naming the key and where to add it. Keys added on the
    command line with ``+``/``++`` (``added``: the shared check list adds other methods' keys)
    are left alone; the config itself is not changed. ``option`` is the chosen ``conf/method`` file."""
    option = option or cfg.method.name
    method = _registered(cfg.method.name, option)
    config = method.config
    where = f"{config.__name__} ({method.__module__})"
    declared, present = _field_keys(config), _node_keys(cfg.method)
    for key in sorted(declared - present):
        raise ConfigError(f"method.{key}: {where} declares it but conf/method/{option}.yaml does not set it; "
                          f"add '{key}: <value>' to the YAML or remove the field")
    for key in sorted(present - declared - set(added)):
        raise ConfigError(f"method.{key}: set by conf/method/{option}.yaml (or a method_scale/<scale>/{option}.yaml) "
                          f"but {where} declares no such field; add '{key.split('.')[-1]}: <type> = MISSING' to it "
                          f"or remove the key")
    try:
        OmegaConf.merge(OmegaConf.structured(config), _declared(config, cfg.method))
    except OmegaConfBaseException as err:
        raise ConfigError(f"method.{err.full_key}: {str(err.msg).splitlines()[0]}") from None


def _field_keys(config: type, prefix: str = "") -> set[str]:
    """Every key the dataclass ``config`` declares, nested ones as ``a.b``."""
    types = get_type_hints(config)
    keys: set[str] = set()
    for f in fields(config):
        keys |= _field_keys(types[f.name], f"{prefix}{f.name}.") if is_dataclass(types[f.name]) else {prefix + f.name}
    return keys


def _node_keys(node: DictConfig, prefix: str = "") -> set[str]:
    """Every key of the config node, nested ones as ``a.b``."""
    keys: set[str] = set()
    for key, value in node.items():
        keys |= _node_keys(value, f"{prefix}{key}.") if isinstance(value, DictConfig) else {prefix + str(key)}
    return keys


def _declared(config: type, node: DictConfig) -> dict:
    """``node``'s keys that the dataclass ``config`` declares, recursively."""
    types = get_type_hints(config)
    return {f.name: _declared(types[f.name], node[f.name])
            if is_dataclass(types[f.name]) and isinstance(node[f.name], DictConfig) else node[f.name]
            for f in fields(config) if f.name in node}


def switch_noise_off(cfg: DictConfig) -> DictConfig:
    """``privacy.noiseless=true`` (the ladder's R4): every noise parameter of the method's
    mechanisms (its ``Method.noise_off``: e.g. privacy.query_epsilon = inf, privacy.sigma = 0) is set
    to its no-noise value, so the logged config, the mechanism and both ledgers all say what ran:
    the structure (top-k, normalisation, output step, the student prior) with no noise, eps = inf."""
    if not cfg.privacy.noiseless:
        return cfg
    if cfg.privacy.mode == "none":
        raise ConfigError("privacy.noiseless=true keeps a mechanism's structure: it needs privacy=label or data, got privacy=none")
    if cfg.privacy.calibrate != "off":
        raise ConfigError(f"privacy.noiseless=true has no noise to calibrate: needs privacy.calibrate=off, got {cfg.privacy.calibrate}")
    noise_off = METHODS.get(cfg.method.name).noise_off
    if not noise_off:
        raise ConfigError(f"method {cfg.method.name} does not support privacy.noiseless (no noise switch declared)")
    for key, value in noise_off.items():
        if OmegaConf.select(cfg, key) is not None:
            OmegaConf.update(cfg, key, value)
    return cfg


def validate(cfg: DictConfig, info: DataInfo) -> None:
    """Reject settings no run could honour, before any data is read or model trained: the privacy, step and
    checkpoint settings, against ``info``, the data the run's config names (its dataset, resolved by the run's
    driver). The method's own settings are its own check's (:func:`dpsd.experiment.check_method`)."""
    privacy = cfg.privacy
    if privacy.mode not in PRIVACY_MODES:
        raise ConfigError(f"privacy.mode must be one of {', '.join(PRIVACY_MODES)}, got {privacy.mode!r}")
    if not 0 < privacy.delta < 1:
        raise ConfigError(f"privacy.delta must lie in (0, 1), got {privacy.delta}")
    num_classes = info.num_classes
    if privacy.calibrate not in CALIBRATIONS:
        raise ConfigError(f"privacy.calibrate must be one of {', '.join(CALIBRATIONS)}, got {privacy.calibrate!r}")
    if privacy.calibrate != "off" and privacy.mode == "none":
        raise ConfigError(f"privacy.calibrate={privacy.calibrate} needs a private mode (label or data), got privacy=none")
    if privacy.calibrate != "off" and privacy.epsilon is None:
        raise ConfigError(f"privacy.calibrate={privacy.calibrate} needs a target privacy.epsilon=...")
    if privacy.mode == "label" or privacy.calibrate != "off":
        if privacy.epsilon is None or privacy.epsilon <= 0:
            raise ConfigError(f"privacy.epsilon must be > 0, got {privacy.epsilon}")
    if privacy.mode == "label" and privacy.calibrate == "off":
        if privacy.query_epsilon is None or privacy.query_epsilon <= 0:
            raise ConfigError(f"privacy.query_epsilon must be > 0, got {privacy.query_epsilon}")
    if privacy.mode == "data":
        for name in ("sigma", "beta"):
            value = privacy[name]
            if value is None or value < 0 or (value == 0 and not (name == "sigma" and privacy.noiseless)):
                raise ConfigError(f"privacy.{name} must be > 0, got {value}")
    if privacy.rr_prior not in RR_PRIORS:
        raise ConfigError(f"privacy.rr_prior must be one of {', '.join(RR_PRIORS)}, got {privacy.rr_prior!r}")
    if privacy.rr_prior == "rr_with_prior" and privacy.rr_domain != "topk":
        raise ConfigError("privacy.rr_prior=rr_with_prior chooses its own answer set per sample: needs privacy.rr_domain=topk")
    if privacy.mode in ("label", "data") and not 2 <= privacy.k <= num_classes:
        raise ConfigError(
            f"privacy.k must lie in [2, {num_classes}] for {cfg.dataset.name} "
            f"({num_classes} classes), got {privacy.k}"
        )
    stem = cfg.model.teacher.get("stem")
    if stem is not None and stem not in STEMS:
        raise ConfigError(f"model.teacher.stem must be one of {', '.join(STEMS)}, got {stem!r}")
    if stem is not None and cfg.model.teacher.arch not in TORCHVISION_FAMILIES:
        raise ConfigError(f"model.teacher.stem={stem} chooses a torchvision family's first layers; "
                          f"model.teacher.arch={cfg.model.teacher.arch} has its own: drop the key (torchvision "
                          f"families: {', '.join(TORCHVISION_FAMILIES)})")
    for name in ("iterations", "batch_size", "steps_per_iteration"):
        if name in cfg.method and cfg.method[name] < 1:
            raise ConfigError(f"method.{name} must be >= 1, got {cfg.method[name]}")
    if cfg.checkpoint.every_steps < 0:
        raise ConfigError(f"checkpoint.every_steps must be >= 0 (0: no checkpoints), got {cfg.checkpoint.every_steps}")


def available_devices() -> list[str]:
    """The devices torch can use here: ``cpu``, then ``cuda:0`` ... and ``mps`` where present."""
    mps = getattr(torch.backends, "mps", None)
    return ["cpu", *(f"cuda:{i}" for i in range(torch.cuda.device_count())),
            *(["mps"] if mps is not None and mps.is_available() else [])]


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA where there is one and the CPU otherwise; a device that is not here
    (``cuda`` without a GPU, ``cuda:3`` on a two-GPU machine) is a ConfigError listing those that are."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device {name!r} is not a device name; here: {', '.join(available_devices())}") from None
    index = 0 if device.index is None else device.index
    present = {"cpu": True, "cuda": index < torch.cuda.device_count(), "mps": "mps" in available_devices()}
    if not present.get(device.type, False):
        raise ConfigError(f"device {name!r} is not on this machine; here: {', '.join(available_devices())}")
    return device


def resolve_paths(cfg: DictConfig) -> DictConfig:
    """Make every path absolute (Ray trials change their working directory)."""
    cfg = cfg.copy()
    cfg.results_dir = str(Path(cfg.results_dir).expanduser().resolve())
    cfg.checkpoint.dir = str(Path(cfg.checkpoint.dir or Path(cfg.results_dir) / "checkpoints").expanduser().resolve())
    if cfg.data.root is not None:
        cfg.data.root = str(Path(cfg.data.root).expanduser().resolve())
    return cfg
