"""Per-method scales: a scale changes a method's own YAML only where it names that method
(dpsd/conf/method_scale/<scale>/<method>.yaml); every method composes at every scale."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from dpsd.config import CONFIG_DIR, compose
from dpsd.methods import METHODS

SCALES = ("check", "smoke", "laptop", "paper")
SIZE_KEYS = ("iterations", "batch_size", "num_teachers", "teachers", "num_clients", "stages", "samples_per_stage")

# (scale, method) -> the sizes the scale must give; methods a scale does not name keep their YAML's.
EXPECTED = {
    ("paper", "dpsd"): {"iterations": 200, "batch_size": 256},  # DPSD §IV-A
    ("paper", "dpsd_t"): {"iterations": 200, "batch_size": 256},
    ("paper", "fed_dpsd"): {"iterations": 200, "batch_size": 256, "num_clients": 5},
    ("paper", "dpdfd"): {"iterations": 200, "batch_size": 256, "teachers": 1},
    ("paper", "dp_dfd"): {"stages": 320, "samples_per_stage": 160, "batch_size": 128},
    ("paper", "dgd"): {"iterations": 1000, "batch_size": 128, "num_teachers": 250, "queries": 750, "member_steps": 50},
    ("paper", "dgd_plus"): {"num_teachers": 250, "member_steps": 50},
    ("paper", "pate"): {"num_teachers": 250, "batch_size": 64, "sigma": 40.0, "member_steps": 50},  # pate.yaml's batch stands
    ("smoke", "dpsd"): {"iterations": 400, "batch_size": 128},
    ("smoke", "dgd"): {"iterations": 400, "batch_size": 128, "num_teachers": 10},
    ("smoke", "pate"): {"batch_size": 64, "num_teachers": 10, "epochs": 1},
    ("smoke", "dpsgd"): {"epochs": 0.1},  # a tenth of an expected pass: 10 steps at q = 0.01
    ("smoke", "lp1st"): {"epochs": 1},
    ("laptop", "dpsd"): {"iterations": 200, "batch_size": 128},  # DPSD §IV-A T at b = 128
    ("laptop", "dpsd_t"): {"iterations": 200, "batch_size": 128},
    ("laptop", "dfkd"): {"iterations": 200, "batch_size": 128},
    ("laptop", "lp1st"): {"epochs": 3},
    ("laptop", "dpsgd"): {"epochs": 2},
    ("laptop", "dgd"): {"iterations": 400, "member_steps": 15, "num_teachers": 250, "synthetic_count": 10000},  # the papers' 250 members
    ("laptop", "pate"): {"member_steps": 15, "num_teachers": 250, "batch_size": 64},
    ("laptop", "dp_dfd"): {"stages": 40, "samples_per_stage": 1280, "student_epochs": 1},  # the paper's ~50,000 labels (Fig. 2)
    ("laptop", "template"): {"batch_size": 64},
}


@pytest.mark.parametrize(("scale", "method"), sorted(EXPECTED))
def test_a_scale_gives_each_method_its_own_sizes(scale, method):
    cfg = compose([f"method={method}", f"scale={scale}"])
    assert cfg.scale.name == scale
    assert {key: cfg.method[key] for key in EXPECTED[(scale, method)]} == EXPECTED[(scale, method)]


def _named_keys(scale: str, method: str) -> set[str]:
    """The method keys the scale's file for ``method`` sets, its own defaults (another method's file) included."""
    path = CONFIG_DIR / "method_scale" / scale / f"{method}.yaml"
    if not path.exists():
        return set()
    node = OmegaConf.load(path)
    keys = set(node.get("method", {}).keys())
    for parent in node.get("defaults", []):
        if isinstance(parent, str) and parent.startswith("/method_scale/"):
            _, _, parent_scale, parent_method = parent.split("/")
            keys |= _named_keys(parent_scale, parent_method)
    return keys


@pytest.mark.parametrize("scale", SCALES)
def test_a_scale_changes_a_method_only_where_it_names_it(scale):
    for method in METHODS.names():
        scaled = compose([f"method={method}", f"scale={scale}"])
        own = compose([f"method={method}", f"scale={scale}", "~method_scale"])  # the method's YAML alone
        changed = {key for key in own.method if own.method[key] != scaled.method[key]}
        assert changed <= _named_keys(scale, method), (scale, method, changed)
        assert set(scaled.method) == set(own.method), (scale, method)  # a scale adds no keys to a method
        assert all(scaled.method.get(key) is None or scaled.method[key] >= 1
                   for key in SIZE_KEYS if key in scaled.method), (scale, method)


def test_the_command_line_wins_over_the_scale():
    cfg = compose(["method=dgd", "scale=paper", "method.num_teachers=20", "method.iterations=7"])
    assert (cfg.method.num_teachers, cfg.method.iterations) == (20, 7)


@pytest.mark.parametrize("scale", SCALES)
def test_a_scale_file_sets_no_method_key_for_every_method(scale):
    assert "method" not in OmegaConf.load(CONFIG_DIR / "scale" / f"{scale}.yaml")


def test_the_check_scale_is_the_smoke_scale_under_its_own_name():
    """scale=check is smoke's sizes (a sweep shrinks them further by sweeps/common/check.yaml): scale/check.yaml and
    each method_scale/check/<method>.yaml point at smoke's, so smoke's files stay their one source."""
    smoke_files = sorted(p.name for p in (CONFIG_DIR / "method_scale" / "smoke").glob("*.yaml"))
    assert sorted(p.name for p in (CONFIG_DIR / "method_scale" / "check").glob("*.yaml")) == smoke_files
    for name in smoke_files:
        node = OmegaConf.load(CONFIG_DIR / "method_scale" / "check" / name)
        assert list(node.get("defaults", [])) == [f"/method_scale/smoke/{name[:-5]}", "_self_"], name
        assert set(node) == {"defaults"}, name  # a pointer, no sizes of its own
    for method in METHODS.names():
        check = OmegaConf.to_container(compose([f"method={method}", "scale=check"]), resolve=True)
        smoke = OmegaConf.to_container(compose([f"method={method}", "scale=smoke"]), resolve=True)
        assert check.pop("scale") == {"name": "check"} and smoke.pop("scale") == {"name": "smoke"}
        assert check == smoke, method
