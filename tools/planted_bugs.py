"""Plant each privacy bug of the list below (a wrong noise, epsilon, sensitivity, sampling rate or count, and the
like) in a scratch copy of the tree and name the test that catches it.

    python tools/planted_bugs.py [--only NAME ...]

For every bug: copy the tracked files to a temporary folder, replace one exact snippet, run the
named test selection there with ``pytest -x``, and print whether it failed (caught) and which test
failed first. The real tree is never touched; a snippet that is no longer in the code is reported
as ``stale`` (the bug list must follow the code).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Bug:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


BUGS = (
    Bug("dpsd label mechanism at 4 eps_0 (PrivateAnnotator.label_sensitive)", "dpsd/distill/annotators.py",
        "float(self.privacy.query_epsilon), self.rng, domain=self.privacy.rr_domain, note=LABEL_NOTE,",
        "4 * float(self.privacy.query_epsilon), self.rng, domain=self.privacy.rr_domain, note=LABEL_NOTE,",
        ("tests/test_privacy_references.py", "tests/test_contract.py::test_every_method_runs_evaluates_and_fills_the_ledger_it_planned[dpsd-None]")),
    Bug("randomized response keeps the truth at 4 eps inside the mechanism, event unchanged", "dpsd/privacy/mechanisms.py",
        "keep_p = randomized_response_keep_probability(epsilon, num_buckets)",
        "keep_p = randomized_response_keep_probability(4 * epsilon, num_buckets)",
        ("tests/test_mechanisms.py", "tests/test_privacy_references.py")),
    Bug("Laplace RDP noise multiplier 2/eps instead of 1/eps", "dpsd/privacy/accounting.py",
        "dp = dp_event.LaplaceDpEvent(noise_multiplier=1 / event.epsilon)",
        "dp = dp_event.LaplaceDpEvent(noise_multiplier=2 / event.epsilon)",
        ("tests/test_privacy_references.py", "tests/test_accounting.py")),
    Bug("subsampled-Gaussian PLD at half the sampling rate", "dpsd/privacy/accounting.py",
        "sampling_prob=event.sample_rate,", "sampling_prob=event.sample_rate / 2,",
        ("tests/test_privacy_references.py", "tests/test_accounting.py")),
    Bug("PATE GNMax aggregator noise cut to 1/4 (the event follows the call)", "baselines/pate.py",
        "mechanisms.gaussian_mechanism(votes, math.sqrt(2), float(method.sigma), rng, note=GNMAX_NOTE)",
        "mechanisms.gaussian_mechanism(votes, math.sqrt(2), float(method.sigma) / 4, rng, note=GNMAX_NOTE)",
        ("tests/test_contract.py::test_every_method_runs_evaluates_and_fills_the_ledger_it_planned[pate-None]",)),
    Bug("Gaussian mechanism adds 1/4 of the noise its event states", "dpsd/privacy/mechanisms.py",
        "return values + gaussian_noise(values, noise_std, rng), event",
        "return values + gaussian_noise(values, noise_std / 4, rng), event",
        ("tests/test_privacy_references.py",)),
    Bug("DGD latent Laplace noise at half its scale (the event follows the call)", "dpsd/methods/dgd.py",
        "2.0 * c / float(cfg.method.latent_epsilon), ctx.rng,", "c / float(cfg.method.latent_epsilon), ctx.rng,",
        ("tests/test_contract.py::test_every_method_runs_evaluates_and_fills_the_ledger_it_planned[dgd-None]",)),
    Bug("Laplace mechanism adds half the noise its event states", "dpsd/privacy/mechanisms.py",
        "return values + laplace_noise(values, scale, rng), event",
        "return values + laplace_noise(values, scale / 2, rng), event",
        ("tests/test_privacy_references.py",)),
    Bug("data-mode sensitivity beta instead of 2 beta", "dpsd/distill/annotators.py",
        "one = 2 * float(privacy.beta) / teachers", "one = float(privacy.beta) / teachers",
        ("tests/test_privacy_references.py",)),
    Bug("a mechanism counts one release per batch instead of per row", "dpsd/privacy/mechanisms.py",
        "        return int(values.shape[0])\n", "        return 1\n",
        ("tests/test_privacy_references.py", "tests/test_mechanisms.py")),
    Bug("an annotator forgets to record its event", "dpsd/distill/annotators.py",
        "        self.ledger.record(event)\n        return F.one_hot(labels, self.num_classes).to(student_logits.dtype)\n\n    def data_sensitive",
        "        return F.one_hot(labels, self.num_classes).to(student_logits.dtype)\n\n    def data_sensitive",
        ("tests/test_privacy_references.py",)),
)


def tracked_copy(into: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for name in files:
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def plant(bug: Bug) -> str:
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
        tree = Path(tmp)
        tracked_copy(tree)
        target = tree / bug.path
        text = target.read_text()
        if text.count(bug.old) != 1:
            return f"stale ({text.count(bug.old)} matches of the snippet)"
        target.write_text(text.replace(bug.old, bug.new))
        env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *bug.tests],
                                cwd=tree, env=env, capture_output=True, text=True)
        failed = re.findall(r"^FAILED (\S+)", result.stdout, flags=re.MULTILINE)
        if result.returncode == 0:
            return "NOT CAUGHT"
        return f"caught by {failed[0]}" if failed else f"pytest exit {result.returncode}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="substrings of bug names to run")
    args = parser.parse_args()
    for bug in BUGS:
        if args.only and not any(part in bug.name for part in args.only):
            continue
        print(f"{bug.name}: {plant(bug)}", flush=True)


if __name__ == "__main__":
    main()
