"""Typed method configs: each registered method's dataclass declares exactly its YAML's keys, and a
switch outside its Enum stops composition with one line naming the accepted values."""

from dataclasses import fields, is_dataclass
from typing import get_type_hints

import pytest
from omegaconf import DictConfig

from dpsd.config import compose
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
    # a sweep's shared smoke list adds keys only other methods have
    assert compose(["method=dpsd", "++method.vae_epochs=1"]).method.vae_epochs == 1
