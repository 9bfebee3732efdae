"""Progress lines for logs: every few percent of the steps, or every 30 s, never more often."""

import io

from dpsd.progress import UNCHANGED_LINES, Line, ProgressLog, name_cell, read_line


def test_a_line_every_five_percent_and_at_the_end():
    out = io.StringIO()
    log = ProgressLog("dpsd", 200, stream=out, clock=lambda: 0.0)
    for step in range(200):
        log.update(step, {"loss": 0.5})
    lines = out.getvalue().splitlines()
    assert len(lines) == 20  # every 10 of 200 steps
    assert lines[0] == "dpsd: step 10/200 (5%), 0 s loss=0.500" and lines[-1].startswith("dpsd: step 200/200 (100%)")


def test_values_unchanged_over_ten_lines_say_since_which_step_until_they_move():
    out = io.StringIO()
    log = ProgressLog("dafl", 100, every=0.01, stream=out, clock=lambda: 0.0)
    losses = [0.5 - 0.01 * step for step in range(20)] + [0.0] * 30 + [0.1] * 5 + [0.2] * 45
    for step, loss in enumerate(losses):
        log.update(step, {"student_loss": loss, "generator_loss": -2.936})
    flagged = [n for n, line in enumerate(out.getvalue().splitlines(), 1) if "unchanged" in line]
    assert UNCHANGED_LINES == 10 and flagged == list(range(30, 51)) + list(range(65, 101))
    assert out.getvalue().splitlines()[29].endswith("generator_loss=-2.936 (unchanged since step 21)")


def test_a_run_without_values_is_never_called_unchanged():
    out = io.StringIO()
    log = ProgressLog("pate", 50, every=0.02, stream=out, clock=lambda: 0.0)
    for step in range(50):
        log.update(step, {})
    assert "unchanged" not in out.getvalue()


def test_a_named_cell_is_on_every_line_until_unnamed():
    out = io.StringIO()
    log = ProgressLog("dafl", 2, every=0.5, stream=out, clock=lambda: 0.0)
    name_cell("method=dafl seed=2")
    try:
        log.update(0, {})
    finally:
        name_cell("")
    log.update(1, {})
    assert out.getvalue().splitlines() == ["dafl [method=dafl seed=2]: step 1/2 (50%), 0 s",
                                           "dafl: step 2/2 (100%), 0 s"]


def test_a_line_every_thirty_seconds_when_steps_are_slow_or_uncounted():
    out, now = io.StringIO(), [0.0]
    log = ProgressLog("pate", 0, stream=out, clock=lambda: now[0])
    for step in range(10):
        now[0] = 12.0 * step
        log.update(step, {})
    assert [line.split(",")[1] for line in out.getvalue().splitlines()] == [" 36 s", " 72 s", " 108 s"]


def test_a_dgd_run_logs_its_members_generator_and_vae_before_the_student(tmp_path, capsys):
    from dpsd.config import compose
    from dpsd.experiment import run_experiment

    cfg = compose(["method=dgd", "device=cpu", "tracking=none", f"results_dir={tmp_path}", "model.teacher.recipe.steps=30",
                   "method.num_teachers=3", "method.member_steps=15", "method.queries=40", "method.iterations=8",
                   "method.batch_size=32", "method.generator_iterations=3", "method.vae_epochs=1",
                   "method.synthetic_count=200", "method.latent_dim=4"])
    run_experiment(cfg)  # capsys's stdout is not a terminal: the lines a sweep's log gets
    out = capsys.readouterr().out
    assert "dgd members (serial): step 3/3 (100%)" in out
    assert "dgd generator: step 3/3 (100%)" in out
    assert "dgd vae: step 7/7 (100%)" in out  # 1 epoch of 200 synthetic images in batches of 32
    assert out.index("dgd vae:") < out.index("dgd: step 8/8 (100%)")
    run_experiment(cfg)
    assert "members" not in capsys.readouterr().out  # cached members train nothing and print nothing


def test_a_printed_line_reads_back_with_its_cell_step_seconds_and_values():
    out, now = io.StringIO(), [0.0]
    log = ProgressLog("dafl", 4, every=0.25, stream=out, clock=lambda: now[0])
    name_cell("method=dafl seed=0")
    try:
        for step in range(4):
            now[0] = 31.0 * step
            log.update(step, {"student_loss": -0.0001, "generator_loss": -2.936})
    finally:
        name_cell("")
    lines = [read_line(text) for text in out.getvalue().splitlines()]
    assert lines[-1] == Line("dafl", "method=dafl seed=0", 4, 4, 93, {"student_loss": -0.0, "generator_loss": -2.936})
    assert read_line("dafl members: step 12, 30 s") == Line("dafl members", "", 12, 0, 30, {})
    assert read_line("dpsd: resumed from x.pt after step 100") is None


def test_a_quiet_run_says_it_is_alive_and_what_follows_its_last_step(tmp_path):
    """keep_alive: after `quiet` seconds with no progress line, one line on the stream and in the log file; after a
    phase's last step it names what follows (accounting, evaluation, recording); a progress line resets the wait."""
    import io
    import time

    from dpsd import progress

    out, log = io.StringIO(), tmp_path / "run.log"
    progress.log_to(log)
    try:
        with progress.keep_alive("dpsd run dafl", quiet=0.2, stream=out):
            progress.ProgressLog("dafl", total=2, stream=io.StringIO()).update(1, {"loss": 1.0})  # the last step
            time.sleep(5.6)
    finally:
        progress.log_to(None)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("dpsd run dafl: still running, ") for line in lines)
    assert lines[0].endswith("s since its last progress line after its last step: accounting, evaluating the student, "
                             "recording")
    assert set(lines) <= set(log.read_text().splitlines())
    assert progress.quiet_line("x", 61.2, False) == "x: still running, 61 s since its last progress line"
