"""A cell's identity: the hash of the resolved config that names what a run trains (:func:`config_hash`).

It decides which recorded run a sweep's cell is, never a number a run computes: result-free code
(``dpsd.version.RESULT_FREE``), so a setting added to a method, listed below at the value every earlier run had,
stales no other method's runs.
"""

from __future__ import annotations

import hashlib

import yaml
from omegaconf import DictConfig, OmegaConf


# Not part of a cell's identity: where results go, where data lives, how runs are tracked and checkpointed.
_UNHASHED = ("tracking", "results_dir", "checkpoint")
# Settings added after cells were recorded, at the value every earlier run had (what their code did before
# the setting existed): left out of the hash at that value, so the archive's cells keep their keys; any other
# value is part of the cell's identity like every setting.
_ADDED_AT_HISTORICAL_VALUE = {
    ("model", "teacher", "input"): {"normalization": "minus_one_one", "image_size": None},
    ("model", "teacher", "stem"): "small_input",
    ("model", "generator", "output"): "tanh",
    ("model", "generator", "block_bn_eps"): 1e-5,
    ("method", "dkd_temperature"): 4.0,
    ("method", "update_order"): "student_first",  # DPSD's loop; DAFL's own values are joint | sequential
    ("method", "rounds"): 1,  # dfpate: one round of queries
    ("method", "pool"): 10,  # dfpate: a later round's pool, unread in one round
    ("method", "augment"): "none",  # dfpate: the student's batches as answered
    ("method", "students"): 1,  # dfpate: one student learns the answers
    ("method", "distill_images"): 5000,  # dfpate: unread with one student
    ("method", "member_augment"): "none",  # dfpate: members trained on their records as drawn
    ("method", "dream_steps"): 0,  # dfpate: a later round's picks answered as drawn
    ("method", "dream_lr"): 0.05,  # dfpate: unread without dream steps
    ("method", "dream_tv"): 0.1,  # dfpate: unread without dream steps
}
# Settings added after cells were recorded whose null means what every earlier run did (no stem chosen: the family's
# default; no target: train every step of the recipe): left out of the hash when null.
_ADDED_AS_NULL = (("model", "teacher", "stem"), ("model", "teacher", "recipe", "target"))
# ``method.dkd_temperature`` came with a change of what ``distillation_loss=dkd`` computes (Eq. (2) as
# printed before, Zhao et al.'s DKD since). A change of what code computes is what staleness is for: the cells keep
# their keys, and every run recorded before is STALE (``dpsd/losses.py`` is in each such method's code closure,
# dpsd/version.py), listed by --dry-run, marked in every table and verdict, re-run with --rerun-stale. Re-keying
# them instead would hide the label-mode and ``kd`` runs, which computed what they compute now.


def config_hash(cfg: DictConfig) -> str:
    """sha256 (16 hex) of the resolved config as sorted YAML, without ``tracking``, ``results_dir``,
    ``checkpoint`` and ``data.root``: two configs that would train the same thing hash the same."""
    return content_hash(identity_content(cfg))


def identity_content(cfg: DictConfig) -> dict:
    """The resolved config as plain data, less what names no run (``tracking``, ``results_dir``, ``checkpoint``,
    ``data.root``): what :func:`content_hash` hashes, and a key a cache of hashes can share across places."""
    container = OmegaConf.to_container(cfg, resolve=True)
    for key in _UNHASHED:
        container.pop(key, None)
    container.get("data", {}).pop("root", None)
    return container


def content_hash(content: dict) -> str:
    """:func:`config_hash` of an :func:`identity_content`; the settings added at their historical value (or as a null
    meaning what earlier runs did) are taken out of ``content`` first."""
    for (*parents, key), value in _ADDED_AT_HISTORICAL_VALUE.items():
        node = content
        for parent in parents:
            node = node.get(parent) or {}
        if key in node and node[key] == value:
            del node[key]
    for *parents, key in _ADDED_AS_NULL:
        node = content
        for parent in parents:
            node = node.get(parent) or {}
        if key in node and node[key] is None:
            del node[key]
    text = yaml.safe_dump(content, sort_keys=True, default_flow_style=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
