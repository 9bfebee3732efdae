"""Typed method configs: each registered method's dataclass declares exactly its YAML's keys, and a
switch outside its Enum stops composition with one line naming the accepted values."""

from dataclasses import fields, is_dataclass
from typing import get_type_hints

import pytest
from omegaconf import DictConfig, OmegaConf

from dpsd.config import check_method_node, compose
from dpsd.errors import ConfigError
from dpsd.methods import METHODS


def declared(config: type, prefix: str = "") -> set[str]:
    types = get_type_hints(config)
    keys = set()
    for f in fields(config):
        keys |= declared(types[f.name], f"{prefix}{f.name}.") if is_dataclass(types[f.name]) else {prefix + f.name}
    return keys


def present(node: DictConfig, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in node.items():
        keys |= present(value, f"{prefix}{key}.") if isinstance(value, DictConfig) else {prefix + key}
    return keys


@pytest.mark.parametrize("name", METHODS.names())
def test_the_dataclass_declares_exactly_the_yaml_keys(name):
    node = compose([f"method={name}"]).method
    assert present(node) == declared(METHODS.get(name).config), name


@pytest.mark.parametrize(("override", "accepted"), [
    ("method=dpsd method.outputs=scores", "[logits, probabilities]"),
    ("method=dpsd method.generator_loss.student_loss=ascend", "[minimize, maximize, off]"),
    ("method=dpdfd method.teacher_target=median", "[argmax, soft]"),
    ("method=dp_dfd method.keep_answer=maybe", "[onehot, soft]"),
    ("method=fed_dpsd method.clients_backend=mpi", "[local, ray]"),
    ("method=dgd method.aggregator=median", "[laplace, gaussian]"),
    ("method=pate method.aggregator=median", "[gnmax, lnmax]"),
    ("method=dpsgd method.accountant=gdp", "[rdp, prv]"),
])
def test_a_bad_switch_is_one_line_at_composition(override, accepted):
    with pytest.raises(ConfigError) as err:
        compose(override.split())
    message = str(err.value)
    assert "\n" not in message and accepted in message and override.split()[-1].split("=")[0] in message


def test_a_value_of_the_wrong_type_is_refused_and_undeclared_keys_are_left_alone():
    with pytest.raises(ConfigError, match="method.student_steps"):
        compose(["method=dpsd", "method.student_steps=many"])
    # a sweep's shared check list adds keys only other methods have
    assert compose(["method=dpsd", "++method.vae_epochs=1"]).method.vae_epochs == 1


def edited(name: str, edit) -> DictConfig:
    cfg = compose([f"method={name}"])
    OmegaConf.set_struct(cfg, False)
    edit(cfg.method)
    return cfg


@pytest.mark.parametrize(("edit", "says"), [
    (lambda node: node.__setitem__("smoothing", 0.1), "method.smoothing: set by conf/method/lp1st.yaml"),
    (lambda node: node.__delitem__("lr"), "method.lr: LP1STConfig (baselines.lp1st) declares it but"),
    (lambda node: node.__setitem__("name", "label_smooth"), "conf/method/lp1st.yaml sets name: label_smooth"),
])
def test_a_yaml_that_disagrees_with_its_dataclass_stops_in_one_line_naming_the_key(edit, says):
    """What `dpsd run` composes is checked, not only this test's walk."""
    with pytest.raises(ConfigError) as err:
        check_method_node(edited("lp1st", edit), "lp1st")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_method_whose_module_is_not_imported_is_told_where_to_import_it():
    cfg = edited("lp1st", lambda node: node.__setitem__("name", "label_smooth"))
    with pytest.raises(ConfigError, match="import its module in dpsd/methods/__init__.py .* baselines/__init__.py"):
        check_method_node(cfg, "label_smooth")


def test_keys_added_on_the_command_line_are_left_to_the_methods_that_read_them():
    assert compose(["method=lp1st", "++method.vae_epochs=1"]).method.vae_epochs == 1
