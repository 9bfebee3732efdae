"""Progress for logs: when stdout is not a terminal (a sweep's trial, CI), tqdm's bar is off, so a
long run prints a plain line every few percent of its steps or every 30 seconds instead. A driver that
runs several cells side by side names the cell on each line (:func:`name_cell`), so an interleaved log
says which seed a line is from. A line whose values have not changed over :data:`UNCHANGED_LINES` lines says
since which step: a run whose losses stop moving may have frozen (DAFL's recipe does, docs/anchors.md), and
hours of its log should not have to be read to see it. A process can also keep every line in a file (:func:`log_to`:
``dpsd run`` keeps them in ``<results_dir>/logs/``); it then prints lines, not a bar, on a terminal too."""

from __future__ import annotations

import re
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO


_CELL = {"label": ""}
_FILE: dict[str, Path | None] = {"path": None}
_LAST = {"time": time.monotonic(), "final": False}
"""When this process printed its last progress line, and whether that line was a phase's last step."""
UNCHANGED_LINES = 10
"""After this many lines with the same printed values, each further one says since which step they have not changed."""


def name_cell(label: str) -> None:
    """Put ``[label]`` after the description on every line this process prints from now on ("": none)."""
    _CELL["label"] = label


def log_to(path: Path | None) -> None:
    """Append every line this process prints from now on to ``path`` as well (folders made; None: no file). While one is
    set, :func:`is_terminal` is False, so a run on a terminal prints its progress as lines (which the file keeps)
    instead of drawing a bar."""
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    _FILE["path"] = Path(path) if path is not None else None


def log_file() -> Path | None:
    """The file :func:`log_to` set (None: none)."""
    return _FILE["path"]


def keep(line: str) -> None:
    """``line`` appended to the :func:`log_to` file, where one is set."""
    if _FILE["path"] is not None:
        with open(_FILE["path"], "a", encoding="utf-8") as handle:
            handle.write(line + "\n")


class ProgressLog:
    """``update(step, metrics)`` prints ``desc: step/total (pct%), elapsed, metrics`` when ``every``
    of ``total`` has passed since the last line or ``seconds`` have (``total`` 0: unknown, time only)."""

    def __init__(self, desc: str, total: int, every: float = 0.05, seconds: float = 30.0,
                 stream: TextIO | None = None, clock=time.monotonic) -> None:
        self.desc, self.total, self.seconds, self.clock = desc, int(total), float(seconds), clock
        self.stride = max(1, round(self.total * every)) if self.total else None
        self.stream = stream or sys.stdout
        self.start = self.last_time = clock()
        self.last_step = 0
        self.last_values, self.same_lines, self.same_since = "", 0, 0

    def update(self, step: int, metrics: dict) -> None:
        done, now = step + 1, self.clock()
        due = (self.stride and done - self.last_step >= self.stride) or now - self.last_time >= self.seconds
        if not (due or done == self.total):
            return
        self.last_step, self.last_time = done, now
        where = f"{done}/{self.total} ({100 * done / self.total:.0f}%)" if self.total else f"{done}"
        values = " ".join(f"{k}={float(v):.3f}" for k, v in metrics.items())  # float(): a device tensor's one sync
        desc = f"{self.desc} [{_CELL['label']}]" if _CELL["label"] else self.desc
        line = f"{desc}: step {where}, {now - self.start:.0f} s {values}{self._unchanged(values, done)}".rstrip()
        print(line, file=self.stream, flush=True)
        keep(line)
        _LAST.update(time=now if self.clock is time.monotonic else time.monotonic(), final=done == self.total)

    def _unchanged(self, values: str, done: int) -> str:
        """`` (unchanged since step N)`` once ``values`` is the same on :data:`UNCHANGED_LINES` lines in a row."""
        if values and values == self.last_values:
            self.same_lines += 1
        else:
            self.last_values, self.same_lines, self.same_since = values, 1, done
        return f" (unchanged since step {self.same_since})" if self.same_lines >= UNCHANGED_LINES else ""


LINE = re.compile(r"^(?P<desc>[^\[:]+?)(?: \[(?P<cell>[^\]]*)\])?: step (?P<step>\d+)(?:/(?P<total>\d+) \(\d+%\))?, "
                  r"(?P<seconds>\d+) s(?P<values>(?: [\w.]+=-?[\d.]+)*)")
"""A line :class:`ProgressLog` prints (what follows its values, such as the unchanged note, is not read)."""


@dataclass(frozen=True)
class Line:
    """A progress line read back (:func:`read_line`): its cell's name ("" where none), step, total (0: unknown),
    seconds and values."""

    desc: str
    cell: str
    step: int
    total: int
    seconds: int
    values: dict[str, float]


def read_line(text: str) -> Line | None:
    """The progress line ``text`` is, read back, or None where it is not one (for tools that read a run's log)."""
    match = LINE.match(text)
    if match is None:
        return None
    values = dict(pair.split("=") for pair in match["values"].split())
    return Line(match["desc"], match["cell"] or "", int(match["step"]), int(match["total"] or 0), int(match["seconds"]),
                {key: float(value) for key, value in values.items()})


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether progress is drawn as a bar: ``stream`` (stdout) is a terminal and no :func:`log_to` file is set."""
    if _FILE["path"] is not None:
        return False
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)())


def quiet_line(desc: str, since: float, final: bool) -> str:
    """What :func:`keep_alive` prints after ``since`` seconds with no progress line; ``final``: the last line was a
    phase's last step (the run's training may be done: its privacy accounting, its evaluation on the test split and
    its recording follow, minutes on a loaded machine)."""
    after = " after its last step: accounting, evaluating the student, recording" if final else ""
    return f"{desc}: still running, {since:.0f} s since its last progress line{after}"


@contextmanager
def keep_alive(desc: str, quiet: float = 60.0, stream: TextIO | None = None):
    """While the block runs: after every ``quiet`` seconds with no progress line, one line saying the run is alive
    (:func:`quiet_line`), on ``stream`` (stdout) and in the :func:`log_to` file, so a terminal and a log never sit
    silent for minutes (the evaluation and recording after a run's last step print no step of their own)."""
    _LAST.update(time=time.monotonic(), final=False)

    def check() -> None:
        since = time.monotonic() - _LAST["time"]
        if since >= quiet:
            line = quiet_line(desc, since, bool(_LAST["final"]))
            print(line, file=stream or sys.stdout, flush=True)
            keep(line)
            _LAST["time"] = time.monotonic()

    with every(min(quiet, 5.0), check, "dpsd-keep-alive"):
        yield


@contextmanager
def every(interval: float, action: Callable[[], None], name: str):
    """Call ``action`` every ``interval`` seconds in a daemon thread called ``name`` while the block runs; it stops
    (and is joined) when the block ends."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            action()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
