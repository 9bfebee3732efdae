"""The ``dpsd`` command.

    dpsd run [overrides]             train, evaluate, account and record one run
    dpsd teacher [overrides]         train (or find in the cache) the teacher a run would use
    dpsd privacy-report [overrides]  both epsilon ledgers for a run, as JSON, without training

Overrides are Hydra's: ``dataset=mnist data.root=../shared/data privacy=label privacy.epsilon=1``.
A bad setting ends the command with one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from dpsd.errors import ConfigError


def _json_default(value: Any) -> Any:
    return str(value)


def _dumps(payload: Any) -> str:
    """JSON with infinite epsilons written as the string "inf" (JSON has no infinity)."""

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    return json.dumps(clean(payload), indent=2, default=_json_default)


def _fmt_eps(value: float) -> str:
    return "inf" if not math.isfinite(value) else f"{value:.4g}"


def print_summary(summary: dict[str, Any]) -> None:
    metrics, privacy = summary["metrics"], summary["privacy"]
    lines = [
        "",
        f"teacher test accuracy   {metrics['teacher_test_accuracy']:.4f}",
        f"student test accuracy   {metrics['student_test_accuracy']:.4f}",
        f"eps_claimed             {_fmt_eps(privacy['eps_claimed'])}  ({privacy['claimed_notion']}, {privacy['claimed_source']})",
        f"eps_rigorous            {_fmt_eps(privacy['eps_rigorous'])}  ((eps, delta)-DP w.r.t. the private training set, {privacy['accountant']}; delta = {privacy['delta']:g}, {privacy['queries']} private releases)",
    ]
    lines += [f"note: {note}" for note in privacy["notes"]]
    if summary.get("run_id"):
        lines += [
            f"MLflow run {summary['run_id']} in {summary['tracking_uri']}",
            f"  open with: mlflow ui --host 127.0.0.1 --backend-store-uri {summary['tracking_uri']}",
        ]
    print("\n".join(lines))


def cmd_run(overrides: list[str]) -> None:
    from dpsd.config import compose
    from dpsd.experiment import run_experiment

    print_summary(run_experiment(compose(overrides)))


def cmd_teacher(overrides: list[str]) -> None:
    from dpsd.config import compose, resolve_paths, validate
    from dpsd.experiment import load_data, resolve_device
    from dpsd.teachers import load_or_train_teacher

    cfg = compose(overrides)
    validate(cfg)
    cfg = resolve_paths(cfg)
    _, record = load_or_train_teacher(cfg, load_data(cfg), resolve_device(cfg.device))
    print(_dumps(record))


def cmd_privacy_report(overrides: list[str]) -> None:
    from dpsd.config import compose
    from dpsd.experiment import privacy_report

    print(_dumps(privacy_report(compose(overrides))))


COMMANDS = {"run": cmd_run, "teacher": cmd_teacher, "privacy-report": cmd_privacy_report}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dpsd", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, key=value")
    args = parser.parse_args(argv)
    try:
        COMMANDS[args.command](args.overrides)
    except ConfigError as err:
        print(f"dpsd {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
