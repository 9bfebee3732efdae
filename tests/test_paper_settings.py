"""scale=paper is each paper's setting wherever results/reference/settings.csv states one: every settings row that
states a value of a config key (dpsd/report/settings.py RULES) is the composed paper-scale config's value, so the
scale's YAML (dpsd/conf/method_scale/paper/, teacher_scale/paper/) and the settings file cannot drift apart; and a
teacher a spec chooses is kept whole at paper scale."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from dpsd.config import CONFIG_DIR, compose
from dpsd.report.settings import differences, load_settings, stated
from dpsd.sweep.spec import expand_configs, load_spec, spec_path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = load_settings(REPO / "results" / "reference" / "settings.csv")

# Per method, the privacy modes it is run in and the config keys its settings rows state (a rule that stops matching
# its row, or a row added without a rule, changes these sets).
CHECKED = {
    "dpsd": (("data", "label"), {"model.teacher.arch", "model.student.arch", "method.iterations", "method.batch_size",
                                 "method.optimizer", "method.output_step", "method.generator_lr", "privacy.sigma",
                                 "privacy.beta", "privacy.k"}),
    "dpsd_t": (("label",), {"model.teacher.arch", "model.student.arch", "method.iterations", "method.batch_size",
                            "method.optimizer", "method.output_step", "method.generator_lr", "privacy.k"}),
    "fed_dpsd": (("data",), {"model.teacher.arch", "model.student.arch", "method.iterations", "method.batch_size",
                             "method.optimizer", "method.output_step", "method.generator_lr", "privacy.sigma",
                             "privacy.beta", "privacy.k", "method.num_clients", "method.dirichlet_alpha"}),
    "dpdfd": (("data",), {"model.teacher.arch", "model.student.arch"}),
    "dp_dfd": (("label",), {"model.teacher.arch", "model.student.arch", "model.teacher.input.image_size",
                            "method.threshold"}),
    "dgd": (("label",), {"method.latent_epsilon"}),
    "dafl": (("none",), {"model.teacher.arch", "model.student.arch", "model.generator.latent_dim", "method.iterations",
                         "method.iterations_per_epoch", "method.batch_size", "method.student_lr", "method.generator_lr",
                         "model.teacher.input.image_size", "model.teacher.input.normalization"}),
}


def test_every_method_of_the_settings_file_is_checked():
    assert set(SETTINGS["method"]) == set(CHECKED)


@pytest.mark.parametrize("method", sorted(CHECKED))
def test_the_paper_scale_config_holds_every_value_the_paper_states(method):
    modes, keys = CHECKED[method]
    for mode in modes:
        for epsilon in ((1, 10) if mode != "none" else (None,)):
            overrides = [f"method={method}", "dataset=mnist", "scale=paper", f"privacy={mode}"]
            overrides += [f"privacy.epsilon={epsilon}"] if epsilon is not None else []
            overrides += [f"privacy.beta={0.001 if epsilon == 1 else 0.005}"] if mode == "data" else []
            cfg = compose(overrides)
            found = stated(SETTINGS, method, cfg)
            assert {item["path"] for item in found} >= {k for k in keys if not k.startswith("privacy.")
                                                        or OmegaConf.select(cfg, k, default=None) is not None}
            wrong = [f"{item['path']}: ours {item['ours']!r}, paper {item['paper']!r} ({item['value']})"
                     for item in found if item["ours"] != item["paper"]]
            assert not wrong, (method, mode, epsilon, wrong)


def test_a_rule_that_stops_matching_is_caught():
    cfg = compose(["method=dpsd", "dataset=mnist", "scale=laptop", "privacy=label"])  # b 128, small CNN
    assert {item["path"] for item in stated(SETTINGS, "dpsd", cfg) if item["ours"] != item["paper"]} == {
        "model.teacher.arch", "method.batch_size"}


def test_dp_dfd_s_student_is_per_experiment():
    """DataLens in its data-sensitive Table I (the headline's rows), ResNet-18 in its label-sensitive Table II."""
    table1 = compose(["method=dp_dfd", "dataset=mnist", "scale=paper", "privacy=label"])
    assert differences(SETTINGS, "dp_dfd", table1, "teacher ResNet34, student DataLens CNN") == []
    assert differences(SETTINGS, "dp_dfd", table1, "teacher ResNet34, student ResNet18") == [
        "student DataLens CNN (paper ResNet-18)"]
    (_, table2), *_ = expand_configs(load_spec(REPO / "sweeps" / "dp_dfd_table2.yaml"), "paper")
    assert differences(SETTINGS, "dp_dfd", table2, "teacher ResNet34, student ResNet18") == []


def test_the_headline_at_paper_scale_differs_from_its_papers_only_in_the_solved_noise_scale():
    for cell, cfg in expand_configs(load_spec(REPO / "sweeps" / "headline.yaml"), "paper"):
        if cfg.method.name in CHECKED and cfg.seed == 0:
            left = [p for p in differences(SETTINGS, cfg.method.name, cfg) if not p.startswith("σ solved")]
            assert not left, (cell.label, left)


TEACHER_SCALED = sorted(p.stem for p in (CONFIG_DIR / "teacher_scale" / "paper").glob("*.yaml"))
TEACHERS = sorted(p.stem for p in (CONFIG_DIR / "model" / "teacher").glob("*.yaml"))


def _teacher_file(name: str) -> dict:
    """``model/teacher/<name>.yaml`` composed by Hydra alone (its own defaults, nothing merged under it)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return OmegaConf.to_container(hydra_compose(config_name=f"model/teacher/{name}"))["model"]["teacher"]


def test_the_paper_scale_gives_its_teacher_where_none_is_chosen():
    """The papers' ResNet-34 (teacher_scale/paper/) is torchvision's ResNet-34 with torchvision's own 7x7 stem, trained
    to the papers' 99.21% plus a 0.10-point margin on a validation cut of the private split: model/teacher=torchvision
    model.teacher.arch=resnet34 but for its stem and its recipe's length and target."""
    assert {"dpsd", "dpsd_t", "fed_dpsd", "dfkd", "dpdfd", "dp_dfd", "teacher"} <= set(TEACHER_SCALED)
    for method in TEACHER_SCALED:
        cfg = compose([f"method={method}", "dataset=mnist", "scale=paper"])
        named = compose([f"method={method}", "dataset=mnist", "scale=paper", "model/teacher=torchvision",
                         "model.teacher.arch=resnet34", "++model.teacher.stem=imagenet", "model.teacher.recipe.steps=3000",
                         "+model.teacher.recipe.target={accuracy: 0.9931, validation: 5000, every: 250}"])
        assert cfg.model.teacher == named.model.teacher, method
        assert cfg.model.teacher.recipe.target.accuracy == pytest.approx(0.9921 + 0.0010)
    assert compose(["method=dgd", "scale=paper"]).model.teacher.arch == "small_cnn"  # no teacher_scale file: the default


def test_the_paper_rows_teacher_named_at_any_scale_is_the_paper_scale_s_teacher():
    """model/teacher=resnet34_paper, as sweeps/ladder_paper_teacher.yaml names it at the ladder's budget, is the teacher
    the paper scale gives DPSD's family, key for key: one cached teacher a seed serves the ladder and the headline (the
    cache key reads model.teacher alone, dpsd/teachers.py teacher_key)."""
    paper = compose(["method=dpsd", "dataset=mnist", "scale=paper"]).model.teacher
    for method in ("dpsd", "dpsd_t", "dpdfd", "dp_dfd", "teacher", "kd_data"):
        named = compose([f"method={method}", "dataset=mnist", "model/teacher=resnet34_paper"]).model.teacher
        assert named == paper, method
    assert "model/teacher=resnet34_paper" in load_spec(spec_path("ladder_paper_teacher")).base


@pytest.mark.parametrize("teacher", TEACHERS)
def test_a_chosen_teacher_is_kept_whole_at_every_scale(teacher):
    """model/teacher=X is X's file and nothing else, whatever the scale (the paper scale's ResNet-34 once overwrote a
    spec's LeNet-5 key by key: 28 px into a 32 px network) or the method's own teacher (DAFL's LeNet-5)."""
    expected = _teacher_file(teacher)
    for method, scale in [*((m, "paper") for m in TEACHER_SCALED), ("dpsd", "smoke"), ("dafl", "smoke"), ("dafl", "paper")]:
        cfg = compose([f"method={method}", f"scale={scale}", f"model/teacher={teacher}"])
        assert OmegaConf.to_container(cfg.model.teacher) == expected, (method, scale)
