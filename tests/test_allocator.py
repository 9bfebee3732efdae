"""The allocator of a CPU run (dpsd.allocator): which library, which environment, and that it changes no number."""

import subprocess
import sys

import pytest

from dpsd import allocator
from dpsd.errors import ConfigError

# A trainer's weights after three DPSD iterations on the embedded digits, hashed, and the allocator it ran under.
WEIGHTS_AFTER_STEPS = """
import hashlib, sys, torch
from dpsd import allocator
from dpsd.bench import build_trainer
from dpsd.config import compose, resolve_paths
from dpsd.data import load_data
from dpsd.teachers import load_or_train_teacher
overrides = ["method.batch_size=32", "model.teacher.recipe.steps=20", "device=cpu", "tracking=none",
             "results_dir=" + sys.argv[1]]
cfg = resolve_paths(compose(overrides))
data = load_data(cfg)
teacher, _ = load_or_train_teacher(cfg, data, torch.device("cpu"))
trainer = build_trainer(overrides, "dpsd", "none", teacher, data, torch.device("cpu"))
for _ in range(3):
    trainer.step()
digest = hashlib.sha256()
for network in (trainer.student, trainer.generator):
    for value in network.state_dict().values():
        digest.update(value.detach().contiguous().numpy().tobytes())
print(allocator.in_use(), digest.hexdigest())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD: Linux only")
def test_a_named_library_comes_first_and_a_missing_one_is_a_one_line_error(tmp_path):
    library = tmp_path / "libjemalloc.so"
    library.write_bytes(b"")
    assert allocator.find_jemalloc({allocator.LIBRARY_VARIABLE: str(library)}) == str(library)
    with pytest.raises(ConfigError, match="DPSD_JEMALLOC=.*absent.so: no such file"):
        allocator.find_jemalloc({allocator.LIBRARY_VARIABLE: str(tmp_path / "absent.so")})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD: Linux only")
def test_the_jemalloc_environment_preloads_it_before_the_users_preload_and_malloc_removes_only_it(tmp_path):
    library = tmp_path / "libjemalloc.so"
    library.write_bytes(b"")
    environ = {allocator.LIBRARY_VARIABLE: str(library), "LD_PRELOAD": "/opt/libother.so", "HOME": "/root"}
    env = allocator.env_for("jemalloc", environ)
    assert env["LD_PRELOAD"] == f"{library}:/opt/libother.so" and env["MALLOC_CONF"] == allocator.JEMALLOC_CONF
    assert env["HOME"] == "/root"
    assert allocator.env_for("jemalloc", env) == env  # started again from within it: jemalloc is listed once
    assert allocator.env_for("malloc", env) == {**environ}
    assert "LD_PRELOAD" not in allocator.env_for("malloc", {"LD_PRELOAD": str(library), "MALLOC_CONF": "x"})
    with pytest.raises(ConfigError, match="expected one of malloc, jemalloc"):
        allocator.env_for("tcmalloc", environ)


NO_JEMALLOC = pytest.mark.skipif(not allocator.available(), reason="no jemalloc to preload (Linux with Ray or libjemalloc)")


@NO_JEMALLOC
def test_jemalloc_changes_no_weight_of_a_training_run(tmp_path):
    runs = {}
    for name in allocator.ALLOCATORS:
        out = subprocess.run([sys.executable, "-c", WEIGHTS_AFTER_STEPS, str(tmp_path)], env=allocator.env_for(name),
                             capture_output=True, text=True, check=True).stdout.split()
        runs[name] = out
    assert runs["malloc"][0] == "malloc" and runs["jemalloc"][0] == "jemalloc"  # each ran under its allocator
    assert runs["malloc"][1] == runs["jemalloc"][1]


@NO_JEMALLOC
def test_the_module_prints_the_variables_for_a_shell():
    out = subprocess.run([sys.executable, "-m", "dpsd.allocator"], capture_output=True, text=True, check=True).stdout
    preload, conf = out.split()
    assert preload.startswith("LD_PRELOAD=") and "jemalloc" in preload
    assert conf == f"MALLOC_CONF={allocator.JEMALLOC_CONF}"


@NO_JEMALLOC
def test_a_runs_hardware_tag_names_jemalloc_where_it_ran_under_it():
    tags = {name: subprocess.run([sys.executable, "-c", "from dpsd.tracking import hardware_text; print(hardware_text())"],
                                 env=allocator.env_for(name), capture_output=True, text=True, check=True).stdout.strip()
            for name in allocator.ALLOCATORS}
    assert tags["jemalloc"] == tags["malloc"] + ", jemalloc"
