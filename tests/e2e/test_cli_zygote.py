"""tools/cli_zygote.py: a command forked from the zygote behaves as the same command in a new interpreter
(status, stdout, stderr, files), for the harness's commands and for a probe of what a new `python -m`
sets up (argv, sys.path, __main__, signal handlers, gc, threads, stdin, exit paths)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cli_zygote  # tools/cli_zygote.py, loaded by tests/conftest.py
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not cli_zygote.AVAILABLE, reason="the CLI zygote needs Linux (pidfds)")

PROBE = '''
import atexit, gc, os, signal, sys, threading
print(os.path.basename(sys.argv[0]), sys.argv[1:], sys.path[0] == os.getcwd(), __name__,
      sys.modules["__main__"].__file__ == __file__, sorted(k for k in globals() if not k.startswith("__")))
print(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGPIPE))
print(gc.isenabled(), gc.get_freeze_count(), threading.active_count(), repr(sys.stdin.read()))
atexit.register(print, "atexit ran")
how = sys.argv[1]
if how == "status":
    sys.exit(3)
if how == "message":
    sys.exit("a message")
if how == "crash":
    raise ZeroDivisionError("probe")
if how == "thread":
    threading.Thread(target=lambda: print("thread joined")).start()
'''


def _both(args: list[str], cwd: Path, stdin: str | None = None):
    forked_before = cli_zygote.counts()[0]
    forked = cli_zygote.run(args, cwd=cwd, timeout=120, input=stdin)
    assert cli_zygote.counts()[0] == forked_before + 1  # it was forked, not run anew
    real = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          input=stdin, check=False)
    return forked, real


@pytest.mark.parametrize("how", ["ok", "status", "message", "thread"])
def test_a_probe_sees_what_a_new_interpreter_sets_up(tmp_path, how):
    (tmp_path / "probe.py").write_text(PROBE)
    forked, real = _both(["-m", "probe", how], tmp_path, stdin="some input")
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert "atexit ran" in forked.stdout and "True __main__ True" in forked.stdout


def test_a_crash_is_status_1_and_its_traceback_ends_the_same(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    forked, real = _both(["-m", "probe", "crash"], tmp_path)
    assert forked.returncode == real.returncode == 1
    assert forked.stdout == real.stdout
    assert forked.stderr.splitlines()[-1] == real.stderr.splitlines()[-1] == "ZeroDivisionError: probe"


@pytest.mark.parametrize("args", [["-m", "harness", "deployment=nope"], ["-m", "harness.trace", "stats", "nope.jsonl"],
                                  ["-m", "harness", "--help"]])
def test_harness_commands_answer_the_same(args):
    forked, real = _both(args, ROOT)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_a_run_writes_the_same_files(tmp_path):
    common = ["workload=fixed", "workload.num_requests=5", "analysis.figures=false", "loadgen.progress=false"]
    forked = cli_zygote.run(["-m", "harness", *common, f"hydra.run.dir={tmp_path / 'a'}"], cwd=ROOT, timeout=120)
    real = subprocess.run([sys.executable, "-m", "harness", *common, f"hydra.run.dir={tmp_path / 'b'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert forked.returncode == real.returncode == 0, forked.stderr + real.stderr
    assert forked.stdout.replace(str(tmp_path / "a"), "X") == real.stdout.replace(str(tmp_path / "b"), "X")
    files = {p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file()}
    assert files == {p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file()}
    for name in ("requests.parquet", "summary.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_a_timeout_kills_the_command(tmp_path):
    (tmp_path / "sleeper.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n")
    with pytest.raises(subprocess.TimeoutExpired) as err:
        cli_zygote.run(["-m", "sleeper"], cwd=tmp_path, timeout=3)
    assert "started" in (err.value.output or "")
