"""Progress lines for logs: every few percent of the steps, or every 30 s, never more often."""

import io

from dpsd.progress import ProgressLog


def test_a_line_every_five_percent_and_at_the_end():
    out = io.StringIO()
    log = ProgressLog("dpsd", 200, stream=out, clock=lambda: 0.0)
    for step in range(200):
        log.update(step, {"loss": 0.5})
    lines = out.getvalue().splitlines()
    assert len(lines) == 20  # every 10 of 200 steps
    assert lines[0] == "dpsd: step 10/200 (5%), 0 s loss=0.500" and lines[-1].startswith("dpsd: step 200/200 (100%)")


def test_a_line_every_thirty_seconds_when_steps_are_slow_or_uncounted():
    out, now = io.StringIO(), [0.0]
    log = ProgressLog("pate", 0, stream=out, clock=lambda: now[0])
    for step in range(10):
        now[0] = 12.0 * step
        log.update(step, {})
    assert [line.split(",")[1] for line in out.getvalue().splitlines()] == [" 36 s", " 72 s", " 108 s"]
