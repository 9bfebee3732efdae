

def test_a_resumed_runs_wall_is_the_whole_runs_and_its_mlflow_run_starts_when_it_did():
    """time_total_s of a resumed run counts the training before the resume, this process's kept beside it; a run not
    resumed, or whose times are already whole, is left as it is; the MLflow start is the end less the whole wall."""
    from dpsd.tracking import run_start_ms, whole_run_wall

    resumed = {"time_total_s": 1200.0, "time_train_s": 49000.0, "train_s_before_resume": 48000.0}
    assert whole_run_wall(resumed) == {"time_total_s": 49200.0, "time_since_resume_s": 1200.0}
    assert whole_run_wall({**resumed, **whole_run_wall(resumed)}) == {}  # recorded twice (a retry): counted once
    assert whole_run_wall({"time_total_s": 1200.0}) == {}
    assert run_start_ms({"time_total_s": 49200.0}, now=50000.0) == 800_000
