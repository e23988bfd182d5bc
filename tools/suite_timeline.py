"""Where the test suite's time goes: wall and CPU seconds per test, module and xdist worker.

As a pytest plugin it appends one JSON line per test (start, end, CPU of the worker and of the
children it reaped during the test) to $TIMELINE_DIR/<worker>.jsonl; run as a script it prints the
modules by wall time (with CPU, worker, start) and each worker's busy time and last end.

    PYTHONPATH=tools TIMELINE_DIR=/tmp/tl .venv/bin/python -m pytest -q -p suite_timeline -n 3 \\
        --dist loadscope --no-loadscope-reorder
    .venv/bin/python tools/suite_timeline.py /tmp/tl [N modules]

CPU of a child is counted when it is reaped: a session-scoped server's lands on the worker's last test.
Commands run through tools/cli_zygote.py count in the test that ran them (its child_cpu()); the
zygotes' own start-up (~1 s each) is not in any test.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pytest

_out: dict[str, Any] = {}


def _cpu() -> tuple[float, float]:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    zygote = sys.modules.get("cli_zygote")  # commands forked by tools/cli_zygote.py: the zygote reaps them
    forked = zygote.child_cpu() if zygote is not None else 0.0
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime + forked


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    if "file" not in _out:
        folder = Path(os.environ.get("TIMELINE_DIR", "timeline"))
        folder.mkdir(parents=True, exist_ok=True)
        _out["file"] = (folder / f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl").open("a")
    wall0, (own0, kids0) = time.time(), _cpu()
    _out["outcome"] = "passed"
    yield
    wall1, (own1, kids1) = time.time(), _cpu()
    row = {"id": item.nodeid, "start": wall0, "end": wall1, "self": own1 - own0, "child": kids1 - kids0,
           "outcome": _out["outcome"]}
    _out["file"].write(json.dumps(row) + "\n")
    _out["file"].flush()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed or (report.skipped and _out.get("outcome") == "passed"):
        _out["outcome"] = f"{report.outcome} in {report.when}"


def pytest_unconfigure(config: pytest.Config) -> None:
    if "file" in _out:
        zygote = sys.modules.get("cli_zygote")
        if zygote is not None:
            forked, real = zygote.counts()
            _out["file"].write(json.dumps({"cli_commands": {"forked": forked, "real": real}}) + "\n")
        _out.pop("file").close()


def report(folder: Path, top: int = 60) -> None:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "cli_commands" in row:  # tools/cli_zygote.py's counts
                print(f"worker {path.stem}: commands through cli_zygote.run: {row['cli_commands']}")
                continue
            rows.append({**row, "worker": path.stem})
    t0 = min(r["start"] for r in rows)
    mods: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["start"]):
        m = mods.setdefault(r["id"].split("::")[0], {"worker": r["worker"], "start": r["start"] - t0, "wall": 0.0,
                                                      "cpu": 0.0, "n": 0})
        m["wall"] += r["end"] - r["start"]
        m["cpu"] += r["self"] + r["child"]
        m["n"] += 1
    print(f"{'module':66s} {'worker':>6s} {'start':>6s} {'wall':>6s} {'cpu':>6s} {'tests':>5s}")
    for name, m in sorted(mods.items(), key=lambda kv: -kv[1]["wall"])[:top]:
        print(f"{name:66s} {m['worker']:>6s} {m['start']:6.1f} {m['wall']:6.1f} {m['cpu']:6.1f} {m['n']:5d}")
    workers: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for r in rows:
        w = workers[r["worker"]]
        w[0] += r["end"] - r["start"]
        w[1] = max(w[1], r["end"] - t0)
        w[2] += r["self"] + r["child"]
    for name, (busy, last, cpu) in sorted(workers.items()):
        print(f"worker {name}: in tests {busy:.1f} s, last test ended at {last:.1f} s, CPU {cpu:.1f} s")
    for r in rows:
        if r.get("outcome", "passed") != "passed":
            print(f"{r['outcome']}: {r['id']} (worker {r['worker']}, at {r['start'] - t0:.1f} s)")
    print(f"all tests: {sum(m['wall'] for m in mods.values()):.1f} s of wall, "
          f"{sum(m['cpu'] for m in mods.values()):.1f} s of CPU")


if __name__ == "__main__":
    report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 60)
