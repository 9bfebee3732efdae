"""Thread hygiene (dpsd.threads, docs/performance.md): the entry points make torch's OpenMP runtime
wait passively unless the user chose otherwise, set as many threads as the CPUs given, and the
waiting policy changes no result."""

import json
import os
import re
import subprocess
import sys

import pytest

from dpsd import threads

TINY = ["tracking=none", "method.iterations=30", "method.batch_size=32", "model.teacher.recipe.steps=30"]


def spin_count(prelude: str, env: dict[str, str]) -> str:
    """The spin count libgomp took when torch loaded it after ``prelude`` (``OMP_DISPLAY_ENV=VERBOSE``)."""
    shown = subprocess.run([sys.executable, "-c", f"{prelude}; import torch"], env={**env, "OMP_DISPLAY_ENV": "VERBOSE"},
                           capture_output=True, text=True, check=True).stderr
    found = re.search(r"GOMP_SPINCOUNT = '(\d+)'", shown)
    if found is None:
        pytest.skip("torch's OpenMP runtime is not libgomp (no GOMP_SPINCOUNT shown)")
    return found.group(1)


def user_env() -> dict[str, str]:
    """This environment as the user left it: without what conftest set, and the hygiene on."""
    return {key: value for key, value in os.environ.items() if key not in ("OMP_WAIT_POLICY", threads.HYGIENE)}


@pytest.mark.parametrize("entry", ["dpsd.cli", "dpsd.bench"])
def test_an_entry_point_makes_the_openmp_runtime_wait_passively(entry):
    assert spin_count("pass", user_env()) != "0"  # the runtime's own default spins
    assert spin_count(f"import {entry}", user_env()) == "0"  # PASSIVE, set before torch loaded the runtime


def test_the_users_waiting_policy_wins_and_the_hygiene_off_leaves_the_runtimes_default():
    default = spin_count("pass", user_env())
    assert spin_count("import dpsd.cli", {**user_env(), threads.HYGIENE: "0"}) == default
    assert spin_count("import dpsd.cli", {**user_env(), "OMP_WAIT_POLICY": "ACTIVE"}) not in ("0", default)


def test_wait_passively_sets_only_what_the_user_left_unset_and_nothing_when_off():
    environ = {}
    assert threads.wait_passively(environ) == {"OMP_WAIT_POLICY": "PASSIVE"} and environ == {"OMP_WAIT_POLICY": "PASSIVE"}
    mine = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert threads.wait_passively(mine) == {} and mine == {"OMP_WAIT_POLICY": "ACTIVE"}
    off = {threads.HYGIENE: "0"}
    assert threads.wait_passively(off) == {} and off == {threads.HYGIENE: "0"}


def test_without_hygiene_removes_what_this_process_set_and_keeps_what_the_user_set(monkeypatch):
    monkeypatch.setattr(threads, "set_here", {"OMP_WAIT_POLICY": "PASSIVE"})
    assert threads.without_hygiene({"OMP_WAIT_POLICY": "PASSIVE", "PATH": "/bin"}) == {"PATH": "/bin", threads.HYGIENE: "0"}
    monkeypatch.setattr(threads, "set_here", {})
    assert threads.without_hygiene({"OMP_WAIT_POLICY": "PASSIVE"})["OMP_WAIT_POLICY"] == "PASSIVE"


def test_thread_count_is_the_given_share_else_the_users_setting_else_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert threads.thread_count(2.5, {}) == 2 and threads.thread_count(0.5, {}) == 1  # a trial's CPU share
    assert threads.thread_count(None, {"OMP_NUM_THREADS": "4"}) == 4
    assert threads.thread_count(None, {}) == 3
    assert threads.thread_count(None, {threads.HYGIENE: "0"}) is None  # torch's own count
    assert threads.thread_count(1, {threads.HYGIENE: "0"}) == 1  # a trial's share holds either way


def run_tiny(tmp_path, name: str, env: dict[str, str], *overrides: str) -> dict:
    out = tmp_path / f"{name}.json"
    subprocess.run([sys.executable, "-m", "dpsd.cli", "run", *TINY, f"results_dir={tmp_path}", *overrides,
                    "--json", str(out)], env=env, check=True, capture_output=True)
    metrics = json.loads(out.read_text())["metrics"]
    return {key: value for key, value in metrics.items() if not key.startswith("time_")}


@pytest.mark.timeout(600)
def test_the_waiting_policy_changes_no_result_of_the_same_seed(tmp_path):
    """The same seed on the same two threads, waiting actively (the runtime's default, the hygiene
    off) and passively: every metric equal to the last bit. A third run at another seed shows that
    the metrics compared do move with what a run computes."""
    two = {**user_env(), "OMP_NUM_THREADS": "2"}
    spinning = run_tiny(tmp_path, "spinning", {**two, threads.HYGIENE: "0"})
    passive = run_tiny(tmp_path, "passive", {**two, "OMP_WAIT_POLICY": "PASSIVE"})
    assert passive == spinning
    other_seed = run_tiny(tmp_path, "seed1", {**two, "OMP_WAIT_POLICY": "PASSIVE"}, "seed=1")
    assert other_seed["final_student_loss"] != passive["final_student_loss"]


def test_a_ray_worker_of_a_local_sweep_waits_passively():
    import ray

    from dpsd.sweep.runner import init_ray

    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"  # conftest, as `dpsd sweep` does
    assert init_ray(None, num_cpus=1)
    try:
        seen = ray.get(ray.remote(lambda: os.environ.get("OMP_WAIT_POLICY")).remote())
    finally:
        ray.shutdown()
    assert seen == "PASSIVE"


def test_init_ray_hands_the_waiting_policy_to_the_workers_of_a_cluster_started_elsewhere(monkeypatch):
    import ray

    from dpsd.sweep.runner import init_ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert init_ray("10.0.0.1:6379")
    assert calls[0]["runtime_env"] == {"env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}}
