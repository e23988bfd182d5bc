"""tests/commands.py runs a command in the test's process as `python -m` runs it in a new one: the same exit
status, stdout and stderr. Checked against a real interpreter for the commands no other test starts in a
process of their own (harness, harness-serve, harness-trace and harness-gate have theirs: signals, memory,
crashes)."""

from __future__ import annotations

from pathlib import Path

import commands  # tests/commands.py
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [
    ["harness.plan", "planner.deployments=[homogeneous_pd,nope]"],  # Hydra composition error: exit 2
    ["harness.load", "loadgen.rat=1"],                                # an unknown key: exit 2
    ["harness.profile"],                                              # no target.url: exit 2
    ["harness.report", "--bogus"],                                    # argparse usage: exit 2
])
def test_a_command_in_process_answers_as_in_a_new_interpreter(tmp_path, argv):
    args = ["-m", argv[0], *argv[1:]]
    if argv[0] != "harness.report":
        args.append(f"hydra.run.dir={tmp_path / 'run'}")
    real = commands.run(args, cwd=ROOT, new_process=True)
    here = commands.run(args, cwd=ROOT)
    assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode == 2 and real.stderr.startswith("error: ") and len(real.stderr.splitlines()) == 1, \
        real.stderr
