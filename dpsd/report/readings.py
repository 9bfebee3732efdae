"""The readings' switches: per seed method, each ambiguous passage of its paper as a switch, the values tried, and
for each value the paper's words it follows and what kind of reading it is.

One source of truth: :data:`SWITCH_SETS` gives, per seed method, its paper's switches (:class:`Switch`): how a
switch's value is read from a run's resolved config, and for each value the paper's words it follows (quoted, with
the line of the paper's file in ``../shared/papers/``, or the excerpt's key where only excerpts are held) and
whether it is a faithful reading of them, a repair beyond the paper, an ablation of the method (a term taken out,
as the paper's own ablation tables do), or a substitute for what the paper used and we could not run here (its
ResNet-34 teacher). DPSD and DPSD-T share DPSD's switches (one paper, the discriminator their one difference);
FedDPSD has the subset its Alg. 2 leaves open; DPDFD, DP-DFD and DGD have their own. :func:`switch_values` reads
every switch off a run's config and :func:`off_default` names the faithful readings a run sets away from its
method's defaults. A readings design is analysed in :mod:`dpsd.report.readings_design` and rendered in
:mod:`dpsd.report.readings_page`."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

from omegaconf import DictConfig, OmegaConf

from dpsd.report.tables import DASH
from dpsd.report.verdict import teacher_text
from dpsd.sweep.spec import composed

FAITHFUL, REPAIR, SUBSTITUTE = "faithful", "repair (not in the paper)", "substitute (the paper's ResNet-34 not run)"
ABLATION = "ablation (not the method)"  # a term of the method taken out, as a paper's ablation table does: no reading
TEACHER = "teacher"  # the switch that is a substitute, not a reading: outside the space of faithful combinations


@dataclass(frozen=True)
class Reading:
    """One value of a switch: what it is, the paper's words it follows, and what kind of reading it is."""

    value: str
    kind: str
    words: str
    literal: bool = False  # the reading that follows the letter of the algorithm box (ties go to it)


@dataclass(frozen=True)
class Switch:
    name: str
    key: str  # the config key(s) a spec sets, as a reader types them
    readings: tuple[Reading, ...]
    reader: Callable[[DictConfig], str] | None = None  # how its value is read where it is not the key's value

    def read(self, cfg: DictConfig) -> str:
        """The switch's value in ``cfg``: its reader's, or the key's (the dash where the method has none)."""
        return self.reader(cfg) if self.reader is not None else _select(cfg, self.key)

    def reading(self, value: str) -> Reading:
        for reading in self.readings:
            if reading.value == value:
                return reading
        return Reading(value, "not classified", "")


def _select(cfg: DictConfig, key: str) -> str:
    """A switch's value in a config, or the dash where the method has no such switch (a control, e.g. DAFL)."""
    value = OmegaConf.select(cfg, key, default=None)
    return DASH if value is None else str(value)


def _rates(cfg: DictConfig) -> str:
    return "paper" if math.isclose(float(cfg.method.student_lr), 0.1) else f"student {float(cfg.method.student_lr):g}"


def _generator_output(tanh_words: str, batchnorm_words: str) -> Switch:
    """The generator's last layer, which neither paper describes: DCGAN's tanh (literal: the harness's generator),
    or DAFL's tanh and affine-free BatchNorm, with the paper's words that point to DAFL."""
    return Switch("generator output", "model.generator.output", (
        Reading("tanh", FAITHFUL, f"{tanh_words}; tanh ends DCGAN's", literal=True),
        Reading("tanh_batchnorm", FAITHFUL, batchnorm_words),
    ))


def _entropy_form(per_sample_words: str, batch_mean_words: str) -> Switch:
    """The generator loss's entropy term, printed per sample and described as the batch's class balance (DPDFD's
    Eq. (5), DP-DFD's Eq. (2)): the printed form is the literal one."""
    return Switch("entropy form", "method.generator_loss.entropy_form", (
        Reading("per_sample", FAITHFUL, per_sample_words, literal=True),
        Reading("batch_mean", FAITHFUL, batch_mean_words),
    ))


def _teacher(resnet_words: str) -> Switch:
    """The teacher, a substitute for the paper's ResNet-34 (``resnet_words``: its line), as the readings ran it."""
    return Switch(TEACHER, "model/teacher", reader=teacher_text, readings=(
        Reading("small_cnn, [-1, 1]", SUBSTITUTE, f"{resnet_words}: the harness's small CNN, pixels in [-1, 1]"),
        Reading("lenet5, mean/std", SUBSTITUTE, f"{resnet_words}: DAFL's LeNet-5, MNIST mean/std, 32 px"),
    ))


# DPSD's switches; words: lines of ../shared/papers/dpsd-model-transcription.txt. The readings FedDPSD's Alg. 2 (its
# Appendix D, l.579-613) leaves open as DPSD does are named once and shared by both switch sets.
_ADVERSARIAL = Reading("maximize", FAITHFUL, 'l.84 "we can treat the student as a discriminator variant and enable '
                       'generator update via adversarial learning"')
_ADAM_RATE = Reading("student 0.001", FAITHFUL, 'l.62 "where gamma_s is the learning rate" of Eq. (3): gamma_s read as '
                     "the output step only; the weights' Adam rate unstated (Adam's default 1e-3)")
_RESAMPLE_TRAINED = Reading("resample_trained", FAITHFUL, 'l.49 fresh "b Gaussian noise vectors" each iteration, '
                            'l.92 "we update the generator as well as its inputs with L_s + L_g": the fresh vectors '
                            "updated with the generator within the iteration")
_PAPER_RATES = 'l.155 "The learning rates for student and generator update are set to gamma_s = 0.1 and gamma_g = 0.01"'
_DPSD_OUTPUT = _generator_output("the paper does not describe its generator",
                                 "DAFL [11]'s generator, whose losses Eq. (8) takes (l.84 \"[11, 28]\"), ends in an "
                                 "affine-free BatchNorm")
_DPSD_TEACHER = _teacher('l.155 "ResNet34 as teacher"')

DPSD_SWITCHES: tuple[Switch, ...] = (
    Switch("latents", "method.latents", (
        Reading("trainable", FAITHFUL, 'l.95 Alg. 1 line 1 "generate a batch of random vectors Z(0)", l.100 line 6 '
                '"and the random vectors with z_i(t+1) = z_i(t) - gamma_g ..."', literal=True),
        Reading("resample", FAITHFUL, 'l.49 "This step samples b Gaussian noise vectors {z_i} and feeds them into '
                'Phi_g"; l.28 Fig. 2 "generates synthetic data from random vectors z under Gaussian distribution"'),
        _RESAMPLE_TRAINED,
    )),
    Switch("student steps", "method.student_steps", (
        Reading("1", FAITHFUL, 'l.99 Alg. 1 line 5 "update the student with w_s(t+1) = w_s(t) - gamma_s dL_s/dw_s"',
                literal=True),
        Reading("5", REPAIR, "none: Alg. 1 updates the student once an iteration (DFAD's five steps a round)"),
    )),
    Switch("L_s in the generator's loss", "method.generator_loss.student_loss", (
        Reading("minimize", FAITHFUL, 'l.100 Alg. 1 line 6 "update the generator with w_g(t+1) = w_g(t) - gamma_g '
                'd(L_s + L_g)/dw_g"', literal=True),
        _ADVERSARIAL,
        Reading("off", ABLATION, "Table VI's ablation of the loss terms"),
    )),
    Switch("learning rates", "method.student_lr", reader=_rates, readings=(
        Reading("paper", FAITHFUL, f"{_PAPER_RATES}, on the weights as l.99 Alg. 1 line 5 writes gamma_s", literal=True),
        _ADAM_RATE,
    )),
    Switch("update order", "method.update_order", (
        Reading("student_first", FAITHFUL, "l.99-100 Alg. 1 lines 5-6: the student, then the generator", literal=True),
        Reading("generator_first", FAITHFUL, 'l.92 "we update the generator as well as its inputs with L_s + L_g and '
                'sample data with the trained inputs to update the student with L_s"'),
    )),
    _DPSD_OUTPUT,
    _DPSD_TEACHER,
)

# FedDPSD's switches: what Alg. 2 leaves open (and whether §III-B's "as well as its inputs" carries over to its fresh
# latents). What it settles is not a switch here: fresh latents (l.581 line 3 "Sample b noise samples z"), one student update (l.594 line 16) and the student before the generator (lines 16 then
# 18); nor, at R3, the data mode's top-k and where its noise is added, which act only inside the mechanism.
FED_DPSD_SWITCHES: tuple[Switch, ...] = (
    Switch("latents", "method.latents", (
        Reading("resample", FAITHFUL, 'l.581 Alg. 2 line 3 "Sample b noise samples z", l.596 line 18 updates "w_g" '
                "only", literal=True),
        _RESAMPLE_TRAINED,
    )),
    Switch("L_s in the generator's loss", "method.generator_loss.student_loss", (
        Reading("minimize", FAITHFUL, 'l.596 Alg. 2 line 18 "Update generator w_g^(t+1) = w_g^t - gamma_g '
                'd(L_S + L_G)/dw_g^t"', literal=True),
        _ADVERSARIAL,
    )),
    Switch("learning rates", "method.student_lr", reader=_rates, readings=(
        Reading("paper", FAITHFUL, f"{_PAPER_RATES}, on the weights as l.594 Alg. 2 line 16 writes gamma_s", literal=True),
        _ADAM_RATE,
    )),
    _DPSD_OUTPUT,
    _DPSD_TEACHER,
)

# DPDFD's switches; words: lines of ../shared/papers/dpdfd-ijcai2023.md. What DPDFD's Alg. 1 settles (fresh latents,
# line 2; one student step, line 12; the student before the generator, lines 12 and 14) is not a switch here.
DPDFD_SWITCHES: tuple[Switch, ...] = (
    Switch("teacher target", "method.teacher_target", (
        Reading("argmax", FAITHFUL, 'l.124 "we treat argmax(phi_t(theta_t; D)) as the target labels"', literal=True),
        Reading("soft", FAITHFUL, 'l.124 "the distillation loss L_T same as [Zhao et al., 2022]": DKD distils the '
                "teacher's softmax"),
    )),
    Switch("activation sign", "method.generator_loss.activation_sign", (
        Reading("minimize", FAITHFUL, 'l.130 Eq. (5) "+ beta ||phi_s(theta_s; D)||_2", minimised as printed',
                literal=True),
        Reading("maximize", FAITHFUL, 'l.134 "tend to receive higher activation value if input data are real"'),
    )),
    _entropy_form('l.130 Eq. (5) "+ alpha phi_s(theta_s; D) log(phi_s(theta_s; D))" on each sample',
                  'l.134 "the information entropy loss to measure the class balance of generated data"'),
    Switch("L_s in the generator's loss", "method.generator_loss.student_loss", (
        Reading("minimize", FAITHFUL, 'l.119 Alg. 1 line 14 "theta_g - gamma_g d(L_S + L_G)/d theta_g"', literal=True),
        Reading("maximize", FAITHFUL, 'l.31 "update the generator by taking the student as a fixed discriminator", '
                "read adversarially"),
    )),
    _generator_output("the paper gives no generator",
                      'DAFL (l.49 "[Chen et al., 2019] proposed ... DAFL"), whose generator ends in an affine-free '
                      "BatchNorm"),
    _teacher('l.180 "For ResNet, we use ... 34-layer networks for others"'),
)

# DP-DFD's switches; words: lines of ../shared/papers/dp-dfd-selective-randomized-response.md. Its teacher is not a
# switch: Eq. (2)'s BN-statistics term needs a teacher with BatchNorm, which DAFL's LeNet-5 lacks.
DP_DFD_SWITCHES: tuple[Switch, ...] = (
    Switch("kept answer", "method.keep_answer", (
        Reading("soft", FAITHFUL, 'l.73 Alg. 1 line 9 "Return y_t with probability e^eps/(e^eps+k-1)": the teacher\'s '
                "output itself, which no randomized response covers", literal=True),
        Reading("onehot", FAITHFUL, 'l.88 "return the one-hot type of other elements"; Fig. 1\'s RR_eps(I, y_t) '
                "returns a label"),
    )),
    Switch("Eq. (2) in fine-tuning", "method.finetune_eq2", (
        Reading("teacher", FAITHFUL, 'l.50 "use these data-label pairs to train the student model and fine-tune the '
                'generator": Eq. (2), the generator\'s one loss, kept on the teacher beside the student\'s loss'),
        Reading("off", FAITHFUL, 'l.63 Alg. 1 line 2(d) "fine-tune phi_g on D-hat(i)": the stage\'s labelled pairs '
                "only, through the student's loss on them", literal=True),
    )),
    _entropy_form('l.81 Eq. (2) "+ alpha phi_t log phi_t" on each sample',
                  'l.84 "the information entropy loss to measure the class balance of synthetic data"'),
    _generator_output("the paper gives no generator",
                      'DAFL (l.27 "Chen et al. [15] ... uses the teacher model as a fixed discriminator to train a '
                      'generator"), whose generator ends in an affine-free BatchNorm'),
)


def _bn_statistics(cfg: DictConfig) -> str:
    """Whether DGD's generator loss has the BN-statistics term (its weight above 0); the dash where a method's loss
    has no such term (every switch is read off every run of a readings page)."""
    weight = _select(cfg, "method.generator_loss.bn_statistics")
    return DASH if weight == DASH else "on" if float(weight) > 0 else "off"


# DGD's switches; words: keys of ../shared/papers/dgd-discriminative-generative-distillation.excerpts.json (the paper
# is held as excerpts, no full text): the generator is "trained in a data-free manner" with no loss printed. What
# its R3 settles is not a switch: the Laplace release of the latent codes and its mapping M (code_projection) act only
# with privacy=label.
DGD_SWITCHES: tuple[Switch, ...] = (
    Switch("BN-statistics term", "method.generator_loss.bn_statistics", reader=_bn_statistics, readings=(
        Reading("on", FAITHFUL, 'id_table_4 "it matches the distribution of private data in discriminative space": '
                "DeepInversion's term matching the batch's BatchNorm statistics to the baseline's running ones, beside "
                "DAFL's"),
        Reading("off", FAITHFUL, 'id_table_1 "takes the baseline classifier as a fixed discriminator and trains a '
                'generator in a data-free manner": DAFL\'s losses alone (one-hot, entropy, activation), DAFL\'s '
                "words", literal=True),
    )),
    _generator_output("the paper gives no generator",
                      'DAFL, whose words id_table_1 uses ("a fixed discriminator ... in a data-free manner"); its '
                      "generator ends in an affine-free BatchNorm"),
)


class SwitchSet(NamedTuple):
    """A paper's switches, the file in ../shared/papers/ their words quote, and how they point into it."""

    paper: str
    switches: tuple[Switch, ...]
    pointers: str = "lines (l.)"  # a full text's lines; an excerpts file's keys


DPSD_SET = SwitchSet("dpsd-model-transcription.txt", DPSD_SWITCHES)
# Per seed method, its paper's switches (DPSD-T is DPSD's paper with the teacher as discriminator).
SWITCH_SETS: dict[str, SwitchSet] = {"dpsd": DPSD_SET, "dpsd_t": DPSD_SET,
                                     "fed_dpsd": SwitchSet("dpsd-model-transcription.txt", FED_DPSD_SWITCHES),
                                     "dpdfd": SwitchSet("dpdfd-ijcai2023.md", DPDFD_SWITCHES),
                                     "dp_dfd": SwitchSet("dp-dfd-selective-randomized-response.md", DP_DFD_SWITCHES),
                                     "dgd": SwitchSet("dgd-discriminative-generative-distillation.excerpts.json",
                                                      DGD_SWITCHES, "keys (id_table_N: a table's or figure's caption "
                                                                    "and the passages citing it)")}
READ_METHODS = tuple(SWITCH_SETS)  # the seed methods a readings spec reads; any other method there is a control
# Every switch name once (a name two papers share reads the same config key: one column of
# dpsd.report.readings_design.seed_rows)
READERS: dict[str, Switch] = {switch.name: switch for entry in SWITCH_SETS.values() for switch in entry.switches}


@functools.lru_cache(maxsize=None)
def _defaults(method: str, dataset: str) -> dict[str, str]:
    """Each of ``method``'s switches at its default (conf/method/<method>.yaml on ``dataset``)."""
    cfg = composed([f"method={method}", f"dataset={dataset}"])
    return {switch.key: switch.read(cfg) for switch in SWITCH_SETS[method].switches}


def off_default(cfg: DictConfig) -> str:
    """The switches of a seed method's paper a run sets to a faithful reading other than the method's default,
    as overrides (``keep_answer=onehot finetune_eq2=teacher``; "" for none, for a method without switches, and for a
    repair or an ablation, neither a reading: :mod:`dpsd.report.ladder` names a repair as a variant): a run made at a
    reading before the readings search changed the default stands apart from the default's runs. The teacher is a substitute, not a reading (each
    ladder names its own); a switch the run does not have (the dash: a noise generator has no output layer) is none."""
    method = str(cfg.method.name)
    if method not in SWITCH_SETS:
        return ""
    defaults = _defaults(method, str(cfg.dataset.name))
    found = []
    for switch in SWITCH_SETS[method].switches:
        value = switch.read(cfg)
        if value not in (DASH, defaults[switch.key]) and switch.reading(value).kind == FAITHFUL:
            found.append(f"{switch.key.rpartition('.')[2]}={value}")
    return " ".join(found)


def switch_values(cfg: DictConfig) -> dict[str, str]:
    """Every switch's value in a run's resolved config (the dash where the method has no such setting)."""
    return {name: switch.read(cfg) for name, switch in READERS.items()}
