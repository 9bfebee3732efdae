"""The readings tables: per seed method, each ambiguous passage of its paper as a switch, the values tried, their
accuracy at the design's rung (R3 unless the spec's ``feeds.rung`` names another: DP-DFD, which learns without its
mechanism, is searched at R5) over runs and seeds, and which value is a faithful reading, a repair or an ablation.

One source of truth: :data:`SWITCH_SETS` gives, per seed method, its paper's switches (:class:`Switch`): how a
switch's value is read from a run's resolved config, and for each value the paper's words it follows (quoted, with
the line of the paper's file in ``../shared/papers/``, or the excerpt's key where only excerpts are held) and
whether it is a faithful reading of them, a repair beyond the paper, an ablation of the method (a term taken out,
as the paper's own ablation tables do), or a substitute for what the paper used and we could not run here (its
ResNet-34 teacher). DPSD and DPSD-T share DPSD's switches (one paper, the discriminator their one difference);
FedDPSD has the subset its Alg. 2 leaves open; DPDFD, DP-DFD and DGD have their own.

A spec of kind ``readings`` searches these switches. "Best faithful reading" is a maximum over the faithful
combinations, which only a search of all of them establishes: the ``sweeps/readings_*_full.yaml`` specs run the full
factorial of a method's faithful switches at one teacher; the earlier ``sweeps/readings_r3.yaml``,
``readings_fed_dpsd_r3.yaml``, ``readings_dpdfd_r3.yaml`` and ``readings_dp_dfd_r5.yaml`` were screening fractions,
whose aliases can hide the combination that wins. Each table says how many of the :func:`faithful_space`
combinations ran (:func:`coverage`). :func:`main_effects` reads each switch's effect off a design as the difference
of the mean accuracy over the runs at each value, and :func:`chosen_defaults` applies the default rule: the faithful
run with the best mean accuracy at the search's teacher (the one its faithful combinations ran at: DAFL's LeNet-5,
since the small CNN labels noise one class and cannot tell readings apart), ties (within :data:`TIE` points) to the
run with the most literal values, then to the current defaults. Everything here formats run figures; no number is typed."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd
from matplotlib.figure import Figure
from omegaconf import DictConfig, OmegaConf

from dpsd.config import compose
from dpsd.report.cells import RUN
from dpsd.report.figures import PNG_METADATA
from dpsd.report.scoreboard import MIN_SEEDS
from dpsd.report.tables import DASH, fmt_mean_std, markdown_table
from dpsd.report.verdict import count_noun, teacher_text

FAITHFUL, REPAIR, SUBSTITUTE = "faithful", "repair (not in the paper)", "substitute (the paper's ResNet-34 not run)"
ABLATION = "ablation (not the method)"  # a term of the method taken out, as a paper's ablation table does: no reading
TEACHER = "teacher"  # the switch that is a substitute, not a reading: outside the space of faithful combinations
TIE = 2.0  # points: run means closer than this are a tie, which goes to the more literal run
DEFAULT_RUNG = "R3"  # where a readings design runs unless its spec's feeds.rung says otherwise
DISCRIMINATOR_METHODS = ("dpsd", "dpsd_t")  # the same loop with the student or the teacher as discriminator
# Why the default rule judges runs, not main effects: in a fraction a main effect carries the interactions aliased
# with it; in the full factorial it is the average over the other switches' values, not any one combination.
ALIASED, AVERAGED = "a main effect here carries interactions", "a main effect averages over the other switches"


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
# Every switch name once (a name two papers share reads the same config key: one column of seed_rows)
_READERS: dict[str, Switch] = {switch.name: switch for entry in SWITCH_SETS.values() for switch in entry.switches}


@functools.lru_cache(maxsize=None)
def _defaults(method: str, dataset: str) -> dict[str, str]:
    """Each of ``method``'s switches at its default (conf/method/<method>.yaml on ``dataset``)."""
    cfg = compose([f"method={method}", f"dataset={dataset}"])
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


def switches_of(rows: pd.DataFrame) -> tuple[Switch, ...]:
    """The switches of the seed method ``rows`` hold (rows of one paper; DPSD's where none is a seed method)."""
    methods = [m for m in dict.fromkeys(rows["method"]) if m in SWITCH_SETS]
    return SWITCH_SETS[methods[0]].switches if methods else DPSD_SWITCHES


def switch_values(cfg: DictConfig) -> dict[str, str]:
    """Every switch's value in a run's resolved config (the dash where the method has no such setting)."""
    return {name: switch.read(cfg) for name, switch in _READERS.items()}


def seed_rows(frame: pd.DataFrame, rung: str = DEFAULT_RUNG) -> pd.DataFrame:
    """One row per finished seed of a readings spec run at ``rung`` (its ``feeds.rung``): method, group, seed,
    accuracy, the rung and each switch's value."""
    done = frame[frame["status"] == RUN]
    rows = [{"method": row["method"], "group": row["group"], "seed": row["seed"], "accuracy": row["accuracy"],
             "config_hash": row.get("config_hash", ""), "rung": rung, **switch_values(row["config"])}
            for _, row in done.iterrows()]
    return pd.DataFrame(rows, columns=["method", "group", "seed", "accuracy", "config_hash", "rung", *_READERS])


def spec_rung(feeds) -> str:
    """The rung a readings spec's ``feeds`` name (``feeds.rung``; R3 where they name none)."""
    return str(feeds.get("rung", DEFAULT_RUNG))


def rung_of(rows: pd.DataFrame) -> str:
    """The rung ``rows`` ran at (their ``rung`` column; R3 where they have none)."""
    return str(rows["rung"].iloc[0]) if "rung" in rows and len(rows) else DEFAULT_RUNG


def accuracy_column(rows: pd.DataFrame) -> str:
    """The tables' accuracy column, named by the rung: ``R3 (%)``."""
    return f"{rung_of(rows)} (%)"


def rung_words(rung: str) -> str:
    """The rung as a verdict sentence says where a search ran: ``without privacy (R3)``, ``at R5, ...``."""
    return "without privacy (R3)" if rung == DEFAULT_RUNG else f"at {rung}"


def _mean_std(values: pd.Series) -> str:
    """Mean ± sample std of a column of accuracies (the std only with two or more)."""
    values = values.dropna()
    return fmt_mean_std(values.mean(), values.std(ddof=1) if len(values) > 1 else math.nan) if len(values) else DASH


def varied(rows: pd.DataFrame) -> list[Switch]:
    """The switches of ``rows``' method that take more than one value among them."""
    return [s for s in switches_of(rows) if rows[s.name].nunique() > 1]


def _judged(switches) -> list[Switch]:
    """The switches that are readings: all but the teacher, a substitute for the paper's (its ResNet-34)."""
    return [s for s in switches if s.name != TEACHER]


def faithful_space(switches: tuple[Switch, ...]) -> int:
    """How many faithful combinations a paper's switches admit: the product, over its switches but the teacher, of
    each one's number of faithful values (a repair or an ablation is not a reading of the method). The space whose
    maximum is "the best faithful reading" (../shared/DESIGN.md, "Seeds and readings")."""
    return math.prod(sum(r.kind == FAITHFUL for r in s.readings) for s in _judged(switches))


def faithful_combinations(rows: pd.DataFrame) -> dict[str, set[tuple[str, ...]]]:
    """Per teacher, the distinct faithful combinations ``rows`` ran: each run's values of its switches but the
    teacher, kept where every one is a faithful reading (runs that two designs share count once)."""
    judged = _judged(switches_of(rows))
    found: dict[str, set[tuple[str, ...]]] = {}
    for _, first in rows.drop_duplicates("group").iterrows():
        values = tuple(str(first[s.name]) for s in judged)
        if all(s.reading(v).kind == FAITHFUL for s, v in zip(judged, values)):
            found.setdefault(str(first[TEACHER]), set()).add(values)
    return found


def coverage(rows: pd.DataFrame) -> dict[str, object]:
    """How much of its method's :func:`faithful_space` a search of ``rows`` covered: ``combinations`` (N), the
    distinct faithful combinations run at the search's teacher (the teacher with the most of them; a maximum is over
    one teacher's runs), ``space`` (M) and that ``teacher``. N = M: the full factorial, no effect aliased."""
    found = faithful_combinations(rows)
    teacher = max(found, key=lambda t: len(found[t]), default=str(rows[TEACHER].iloc[0]) if len(rows) else DASH)
    return {"combinations": len(found.get(teacher, ())), "space": faithful_space(switches_of(rows)), "teacher": teacher}


def coverage_sentence(rows: pd.DataFrame) -> str:
    """``48 of 48 faithful combinations run at teacher lenet5, mean/std (full factorial: no effect aliased).``, or a
    fraction's ``(a fraction: the maximum is not established)``: a best reading is a maximum over the whole space."""
    found = coverage(rows)
    design = ("full factorial: no effect aliased" if found["combinations"] == found["space"]
              else "a fraction: the maximum is not established")
    return (f"{found['combinations']} of {found['space']} faithful combinations run at teacher {found['teacher']} "
            f"({design}).")


def main_effects(rows: pd.DataFrame) -> pd.DataFrame:
    """Per varied switch and value: mean ± sample std of the accuracy over the cells (runs x seeds) at that value,
    the runs and cells it rests on, and the effect: the value's mean minus the switch's first value's."""
    accuracy = accuracy_column(rows)
    out = []
    for switch in varied(rows):
        values = [r.value for r in switch.readings if (rows[switch.name] == r.value).any()]
        values += sorted(set(rows[switch.name]) - set(values))
        base = rows.loc[rows[switch.name] == values[0], "accuracy"].mean()
        for value in values:
            at = rows[rows[switch.name] == value]
            reading = switch.reading(value)
            out.append({"Switch": switch.name, "Config": switch.key, "Value": value, "Reading": reading.kind,
                        "Paper's words": reading.words, accuracy: _mean_std(at["accuracy"]),
                        "Runs × seeds": f"{at['group'].nunique()} × {at.groupby('group').size().max()}",
                        "Effect (points)": DASH if value == values[0] else f"{at['accuracy'].mean() - base:+.2f}",
                        "_mean": at["accuracy"].mean()})
    return pd.DataFrame(out, columns=["Switch", "Config", "Value", "Reading", "Paper's words", accuracy, "Runs × seeds",
                                      "Effect (points)", "_mean"])


def run_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the design: its switch values, accuracy mean ± sample std over its seeds, and the seeds."""
    shown, accuracy = varied(rows), accuracy_column(rows)
    out = []
    for group, at in rows.groupby("group", sort=False):
        first = at.iloc[0]
        kinds = {switch.reading(first[switch.name]).kind for switch in shown}
        out.append({**{switch.name: first[switch.name] for switch in shown},
                    accuracy: _mean_std(at["accuracy"]), "Seeds": len(at),
                    "Per seed": ", ".join(f"{a:.2f}" for a in at.sort_values("seed")["accuracy"]),
                    "All faithful": "yes" if kinds <= {FAITHFUL, SUBSTITUTE} else "no", "_mean": at["accuracy"].mean()})
    return pd.DataFrame(out).sort_values("_mean", ascending=False, kind="stable").reset_index(drop=True)


def chosen_defaults(rows: pd.DataFrame, teacher: str, current: dict[str, str] | None = None) -> dict[str, str]:
    """The default rule, on runs: the faithful run (every switch at a faithful value) with the best mean
    accuracy among the runs at ``teacher`` (the search's teacher: the teacher is a substitute, not a reading, and the
    method's default teacher is chosen apart from its readings); of the runs within :data:`TIE` points of it, the one
    with the most literal values (the letter of the algorithm box); of equally literal ones, the run at the
    ``current`` defaults (the method's switch values now), so that defaults move only for a run better by more than a
    tie or more literal, not for a difference among runs that tie (FedDPSD's small-CNN runs, all at chance); then the
    best mean. Returns that
    run's value of each varied switch but the teacher ({} without a faithful run there).

    Runs, not main effects: a value is chosen only with the values it was run with. In a resolution III
    fraction a main effect carries two-factor interactions, so the best value of each switch on its own can
    make a combination that was never run (on MNIST, resample's +26 points came from the runs with five
    student steps, a repair)."""
    judged = _judged(switches_of(rows))
    shown = _judged(varied(rows))
    runs = []
    for _, at in rows[rows[TEACHER] == teacher].groupby("group", sort=False):
        first = at.iloc[0]
        readings = [s.reading(first[s.name]) for s in judged]
        if all(r.kind == FAITHFUL for r in readings):
            runs.append({"values": {s.name: first[s.name] for s in shown}, "mean": at["accuracy"].mean(),
                         "literal": sum(r.literal for r in readings),
                         "current": current is not None and all(first[s.name] == current[s.name] for s in judged)})
    if not runs:
        return {}
    top = max(r["mean"] for r in runs)
    return max((r for r in runs if top - r["mean"] < TIE),
               key=lambda r: (r["literal"], r["current"], r["mean"]))["values"]


def interaction_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Each switch's effect with the student and with the teacher as discriminator (DPSD, DPSD-T), and their
    difference: the switch x discriminator interaction (twice the usual half-difference contrast)."""
    effects = {m: main_effects(rows[rows["method"] == m]) for m in DISCRIMINATOR_METHODS if (rows["method"] == m).any()}
    if len(effects) < 2:
        return pd.DataFrame()
    student, teacher = (effects[m] for m in DISCRIMINATOR_METHODS)
    out = []
    for _, row in student[student["Effect (points)"] != DASH].iterrows():
        other = teacher[(teacher["Switch"] == row["Switch"]) & (teacher["Value"] == row["Value"])]
        if other.empty:
            continue
        a, b = float(row["Effect (points)"]), float(other.iloc[0]["Effect (points)"])
        out.append({"Switch": row["Switch"], "Value": row["Value"], "Effect with the student (DPSD)": f"{a:+.2f}",
                    "Effect with the teacher (DPSD-T)": f"{b:+.2f}", "Difference (points)": f"{a - b:+.2f}"})
    return pd.DataFrame(out)


def search_summary(rows: pd.DataFrame) -> dict[str, object]:
    """What a method's readings search covered: its faithful runs (all values faithful or substitutes), the
    teachers, the least seeds a run has, where it ran (:func:`rung_words`), how much of the faithful space
    (:func:`coverage`: N ``combinations`` of M, the ``space``, at its ``teacher``), and the best faithful run (a
    :func:`run_table` row, or None)."""
    runs = run_table(rows)
    faithful = runs[runs["All faithful"] == "yes"]
    return {"readings": len(faithful), "teachers": rows[TEACHER].nunique(), "where": rung_words(rung_of(rows)),
            "seeds": int(rows.groupby("group").size().min()) if len(rows) else 0, **coverage(rows),
            "best_run": faithful.iloc[0] if len(faithful) else None}


def effects_figure(rows: pd.DataFrame, caption: str, path: Path) -> Path:
    """Main-effects plot: per switch, the mean accuracy at each value (error bars: sample std over runs x seeds),
    one line per method; a flat line is a switch that does not matter."""
    methods = list(dict.fromkeys(rows["method"]))
    switches = varied(rows)
    fig = Figure(figsize=(2.1 * max(1, len(switches)) + 1, 3.6), layout="constrained")
    axes = fig.subplots(1, max(1, len(switches)), sharey=True, squeeze=False)[0]
    for ax, switch in zip(axes, switches):
        values = [r.value for r in switch.readings if (rows[switch.name] == r.value).any()]
        for method in methods:
            at = rows[rows["method"] == method]
            means = [at.loc[at[switch.name] == v, "accuracy"].mean() for v in values]
            stds = [at.loc[at[switch.name] == v, "accuracy"].std(ddof=1) for v in values]
            ax.errorbar(range(len(values)), means, yerr=stds, marker="o", capsize=3, label=method)
        ax.set_xticks(range(len(values)), [v.replace(", ", "\n", 1) for v in values], fontsize=7)
        ax.set_title(switch.name, fontsize=8)
        ax.set_xlim(-0.5, len(values) - 0.5)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(f"{rung_of(rows)} student test accuracy (%)")
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(caption, fontsize=8, wrap=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata=PNG_METADATA)
    return path


def centre_table(rows: pd.DataFrame) -> pd.DataFrame:
    """A one-switch-at-a-time design: the centre (the first group) and, per other group, the switch it flips,
    its value and reading, accuracy mean ± std over its seeds, and its change against the centre over the seeds
    both ran (no alias: nothing else differs)."""
    order, accuracy = list(dict.fromkeys(rows["group"])), accuracy_column(rows)
    centre = rows[rows["group"] == order[0]]
    values = centre.iloc[0]
    out = [{"Flipped": "none (the centre)", "Value": DASH, "Reading": DASH, accuracy: _mean_std(centre["accuracy"]),
            "Seeds": len(centre), "Change (points)": DASH}]
    for group in order[1:]:
        at = rows[rows["group"] == group]
        first = at.iloc[0]
        changed = [switch for switch in switches_of(rows) if first[switch.name] != values[switch.name]]
        common = set(at["seed"]) & set(centre["seed"])
        change = (at[at["seed"].isin(common)]["accuracy"].mean() - centre[centre["seed"].isin(common)]["accuracy"].mean()
                  if common else math.nan)
        out.append({"Flipped": ", ".join(switch.name for switch in changed) or "none",
                    "Value": ", ".join(str(first[switch.name]) for switch in changed) or DASH,
                    "Reading": ", ".join(switch.reading(first[switch.name]).kind for switch in changed) or DASH,
                    accuracy: _mean_std(at["accuracy"]), "Seeds": len(at),
                    "Change (points)": DASH if math.isnan(change) else f"{change:+.2f}"})
    return pd.DataFrame(out)


def _table(frame: pd.DataFrame) -> str:
    return markdown_table(frame[[c for c in frame.columns if not c.startswith("_")]])


def control_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The control methods' cells (not a reading of the seed methods): teacher, accuracy mean ± std, seeds."""
    accuracy = accuracy_column(rows)
    out = [{"Method": at.iloc[0]["method"], "Teacher": at.iloc[0]["teacher"], accuracy: _mean_std(at["accuracy"]),
            "Seeds": len(at), "Per seed": ", ".join(f"{a:.2f}" for a in at.sort_values("seed")["accuracy"])}
           for _, at in rows.groupby("group", sort=False)]
    return pd.DataFrame(out, columns=["Method", "Teacher", accuracy, "Seeds", "Per seed"])


def readings_markdown(title: str, rows: pd.DataFrame, design: str, figure: str | None,
                      one_at_a_time: bool = False) -> str:
    """The readings page section: per method how many of its faithful combinations ran (:func:`coverage_sentence`),
    and the main effects, the runs and the chosen defaults (a factorial design), or the changes around the centre
    (``one_at_a_time``); then the discriminator interaction (DPSD beside DPSD-T) and the controls (the methods that
    are not a seed method's readings)."""
    controls = control_table(rows[~rows["method"].isin(READ_METHODS)])
    rows = rows[rows["method"].isin(READ_METHODS)]
    lines = [f"## {title}", "", design, ""]
    if figure and not one_at_a_time:
        lines += [f"![Main effects of the readings]({figure})", ""]
    for method in dict.fromkeys(rows["method"]):
        at = rows[rows["method"] == method]
        if at.empty:
            continue
        if one_at_a_time:
            centre = at[at["group"] == at.iloc[0]["group"]].iloc[0]
            lines += [f"### {method}: one switch at a time around the centre", "",
                      "Centre: " + ", ".join(f"{s.name} = {centre[s.name]}" for s in switches_of(at)) + ". "
                      + coverage_sentence(at), "",
                      _table(centre_table(at)), ""]
            continue
        effects = main_effects(at)
        counts = search_summary(at)
        best, seeds = counts["best_run"], counts["seeds"]
        current = switch_values(compose([f"method={method}", "dataset=mnist"]))
        teacher = counts["teacher"]  # the search's teacher: the one its faithful combinations ran at
        chosen = chosen_defaults(at, teacher, current)
        changed = [f"{k} {current[k]} -> {v}" for k, v in chosen.items() if current[k] != v]
        verdict = (f" (differs from conf/method/{method}.yaml in: {'; '.join(changed)})." if changed
                   else f": conf/method/{method}.yaml's defaults as they are.")
        rung = rung_of(at)
        rule = (f"Default by the rule (the faithful run with the best mean {rung} at the search's teacher, {teacher}; runs "
                f"within {TIE:g} points of it go to the one with the most literal values, then to the current defaults; "
                f"runs, not main effects, since {ALIASED if counts['combinations'] < counts['space'] else AVERAGED}): "
                + ", ".join(f"{k} = {v}" for k, v in chosen.items()) + verdict
                if seeds >= MIN_SEEDS else
                f"Default by the rule: not chosen yet (a run here has {seeds} seed; the rule needs {MIN_SEEDS} on every "
                f"run). With these runs it would read: " + ", ".join(f"{k} = {v}" for k, v in chosen.items()) + ".")
        lines += [f"### {method}: readings at {rung}", "",
                  f"The paper's words: {SWITCH_SETS[method].pointers} of `../shared/papers/{SWITCH_SETS[method].paper}`. "
                  f"{at['group'].nunique()} runs, {len(at)} finished seeds. Faithful runs: {counts['readings']} "
                  f"(over {count_noun(counts['teachers'], 'teacher')}), at least {count_noun(counts['seeds'], 'seed')} each. "
                  + (f"Best faithful run: {best[accuracy_column(at)]}% (n = {best['Seeds']}). " if best is not None else "")
                  + coverage_sentence(at),
                  "",
                  _table(effects), "", _table(run_table(at)), "", rule, ""]
    interactions = interaction_table(rows)
    if len(interactions):
        lines += ["### Each switch with the student or the teacher as discriminator", "", _table(interactions), ""]
    if len(controls):
        lines += ["### Controls at the same budget and student", "", _table(controls), ""]
    return "\n".join(lines)


def searched(rows: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Per seed method of a readings design: the faithful readings run, teachers, least seeds per run, the rung,
    N of M faithful combinations run at the search's teacher (:func:`coverage`), and its best faithful run's accuracy
    there (mean ± std, n): what a method's verdict sentence says was searched."""
    out: dict[str, dict[str, object]] = {}
    for method in READ_METHODS:
        at = rows[rows["method"] == method]
        if at.empty:
            continue
        summary = search_summary(at)
        best = summary.pop("best_run")
        out[method] = {**summary, "best": DASH if best is None else f"{best[accuracy_column(at)]}% (n = {best['Seeds']})"}
    return out
