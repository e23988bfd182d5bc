"""Signals at random moments of real runs: does every stopped run keep its summary and every finished row?

Three storms, each signal SIGINT or SIGTERM (alternating) at a random moment of a real process:
- sim: `python -m harness workload.num_requests=20000` (the default deployment and workload). One
  run without a signal first is the reference (same seed, same virtual timeline): every request it
  finished before the virtual moment the stopped run reports (`stopped_at_s`) must be in the
  stopped run's requests.parquet, completed, exactly once.
- live: `python -m harness mode=live` (a short fixed workload at `server.time_scale`): every request
  sent has exactly one row, ids 0..n-1, `interrupted` never null.
- serve: `python -m harness.serve` under a load of streaming clients in this process (one thread,
  aiohttp): every request a client sent has exactly one row (by X-Request-Id), every one whose
  response ended before the signal is there, completed, and `interrupted` is never null.

Each signal comes at a random moment after the run started (Hydra made its directory) and before the
unsignalled reference run ended; one that still lands before the run's first file (nothing sent, no files)
is counted apart, as is one sent after the command printed its last line. Prints the counts; a
measurement, not a test (tests/sim/test_signal_points.py is).

    .venv/bin/python benchmarks/signal_storm.py [--sim 50] [--live 20] [--serve 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SIM = ["workload.num_requests=20000", "analysis.figures=false", "loadgen.progress=false"]
LIVE = ["mode=live", "server.time_scale=20", "workload=fixed", "workload.input_tokens=2048",
        "workload.output_tokens=64", "workload.num_requests=60", "loadgen.rate_rps=8", "analysis.figures=false",
        "loadgen.progress=false"]
SERVE = ["server.port=0", "server.time_scale=20", "analysis.figures=false", "recording.flush_s=0.2"]
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _harness(args: list[str], module: str = "harness") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _rows(run_dir: Path) -> pd.DataFrame | None:
    from harness.analysis.frames import read_parquet
    from harness.errors import InputError

    try:
        return read_parquet(run_dir / "requests.parquet")
    except InputError:
        return None


def _summary(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


class Tally:
    def __init__(self, name: str) -> None:
        self.name = name
        self.counts = {"signals": 0, "missed": 0, "after_end": 0, "before_start": 0, "with_summary": 0,
                       "summary_interrupted_key": 0, "rows_exactly_once": 0, "finished_rows_kept": 0, "failures": 0}
        self.exits: dict[int, int] = {}
        self.problems: list[str] = []

    def bad(self, what: str) -> None:
        self.counts["failures"] += 1
        self.problems.append(what)

    def line(self) -> str:
        exits = ", ".join(f"{code}: {n}" for code, n in sorted(self.exits.items()))
        return f"{self.name}: " + ", ".join(f"{k}={v}" for k, v in self.counts.items()) + f"; exit statuses {{{exits}}}"


class _Output:
    """The command's stdout, read as it comes (so its last line, `results: DIR`, can be seen in time)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.lines.append(line)

    def ended(self) -> bool:
        return any(line.startswith("results:") for line in self.lines)

    def text(self) -> str:
        self._thread.join(60)
        return "".join(self.lines)


def _wait_for_start(proc: subprocess.Popen[str], run_dir: Path) -> None:
    """Until Hydra made the run directory (its `.hydra/`: the command has composed and is about to run)."""
    while proc.poll() is None and not (run_dir / ".hydra").is_dir():
        time.sleep(0.01)


def _reference_span(args: list[str], run_dir: Path) -> float:
    """Seconds from the run's start (see _wait_for_start) to the command's exit, without a signal."""
    proc = _harness([*args, f"hydra.run.dir={run_dir}"])
    _wait_for_start(proc, run_dir)
    start = time.monotonic()
    proc.communicate()
    return time.monotonic() - start


def _signal_at(proc: subprocess.Popen[str], sig: int, run_dir: Path, after_s: float) -> tuple[bool, _Output, str]:
    """Send `sig` `after_s` seconds after the run started; (sent, stdout, stderr). Not sent if it had ended."""
    output = _Output(proc)
    _wait_for_start(proc, run_dir)
    time.sleep(after_s)
    if proc.poll() is not None or output.ended():  # the run was over (its files written, its line printed)
        sent = False
    else:
        proc.send_signal(sig)
        sent = True
    assert proc.stderr is not None
    err = proc.stderr.read()  # stdout is the reader thread's
    proc.wait(600)
    return sent, output, err


def _common(t: Tally, run_dir: Path, code: int, err: str, label: str) -> tuple[dict | None, pd.DataFrame | None]:
    t.counts["signals"] += 1
    t.exits[code] = t.exits.get(code, 0) + 1
    summary, rows = _summary(run_dir), _rows(run_dir)
    if summary is None and rows is None:
        t.counts["before_start"] += 1  # nothing sent, nothing to keep
        return None, None
    if summary is None:
        t.bad(f"{label}: no summary.json (exit {code}: {err.strip()[-200:]})")
        return None, rows
    t.counts["with_summary"] += 1
    t.counts["summary_interrupted_key"] += "interrupted" in summary
    if rows is not None and rows["request_id"].is_unique and sorted(rows["request_id"]) == list(range(len(rows))) \
            and ("interrupted" not in rows or rows["interrupted"].notna().all()):
        t.counts["rows_exactly_once"] += 1
    else:
        t.bad(f"{label}: rows not exactly once per request")
    return summary, rows


def sim_storm(n: int, rng: random.Random, tmp: Path) -> Tally:
    t = Tally("sim")
    ref_dir = tmp / "sim_reference"
    span = _reference_span(SIM, ref_dir)
    ref = pd.read_parquet(ref_dir / "requests.parquet").set_index("request_id")
    for i in range(n):
        run_dir = tmp / f"sim_{i}"
        sig = SIGNALS[i % 2]
        proc = _harness([*SIM, f"hydra.run.dir={run_dir}"])
        sent, output, err = _signal_at(proc, sig, run_dir, rng.uniform(0.0, span))
        if not sent:
            t.counts["missed"] += 1
            continue
        if output.ended() and proc.returncode == 0:  # the line came as the signal went: the run was over
            t.counts["after_end"] += 1
            continue
        summary, rows = _common(t, run_dir, proc.returncode, err, f"sim {i} ({sig.name})")
        if summary is None or rows is None:
            continue
        # the virtual moment it stopped (the summary's, exact); a run not interrupted finished everything
        bound = float(summary["stopped_at_s"]) if summary.get("interrupted") else float("inf")
        finished = ref.index[ref["finish_s"] < bound]
        done = rows.set_index("request_id")
        kept = done.reindex(finished)
        if kept["error"].isna().all() and kept["finish_s"].notna().all():
            t.counts["finished_rows_kept"] += 1
        else:
            lost = kept.index[kept["finish_s"].isna() | kept["error"].notna()].tolist()[:5]
            t.bad(f"sim {i} ({run_dir}): {len(lost)} requests finished before the stop (t={bound}) are not "
                  f"completed: ids {lost}, reference finish {ref.loc[lost, 'finish_s'].tolist()}")
    return t


def live_storm(n: int, rng: random.Random, tmp: Path) -> Tally:
    t = Tally("live")
    span = _reference_span(LIVE, tmp / "live_reference")
    for i in range(n):
        run_dir = tmp / f"live_{i}"
        sig = SIGNALS[i % 2]
        proc = _harness([*LIVE, f"hydra.run.dir={run_dir}"])
        sent, output, err = _signal_at(proc, sig, run_dir, rng.uniform(0.0, span))
        if not sent:
            t.counts["missed"] += 1
            continue
        if output.ended() and proc.returncode == 0:
            t.counts["after_end"] += 1
            continue
        summary, rows = _common(t, run_dir, proc.returncode, err, f"live {i} ({sig.name})")
        if summary is not None and rows is not None:
            t.counts["finished_rows_kept"] += 1  # every row sent is there (checked above); the client's own view
    return t


async def _clients(url: str, model: str, sent: list[str], finished: list[str], stop: threading.Event) -> None:
    import aiohttp

    async def one(session: aiohttp.ClientSession, cid: str) -> None:
        body = {"model": model, "prompt": list(range(1, 1500)), "max_tokens": 200, "stream": True}
        try:
            async with session.post(url + "/v1/completions", json=body, headers={"X-Request-Id": cid}) as resp:
                text = await resp.text()
                if resp.status == 200 and "[DONE]" in text:
                    finished.append(cid)
        except (TimeoutError, aiohttp.ClientError):
            pass

    tasks = []
    async with aiohttp.ClientSession() as session:
        k = 0
        while not stop.is_set():
            cid = f"c{k}"
            sent.append(cid)
            tasks.append(asyncio.create_task(one(session, cid)))
            k += 1
            await asyncio.sleep(0.05)
        await asyncio.gather(*tasks, return_exceptions=True)


def _run_clients(*args: object) -> None:
    asyncio.run(_clients(*args))  # type: ignore[arg-type]


def serve_storm(n: int, rng: random.Random, tmp: Path) -> Tally:
    t = Tally("serve")
    for i in range(n):
        run_dir = tmp / f"serve_{i}"
        sig = SIGNALS[i % 2]
        proc = _harness([*SERVE, f"hydra.run.dir={run_dir}"], module="harness.serve")
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("listening on "):
            t.bad(f"serve {i}: did not start: {line!r}")
            proc.kill()
            continue
        url = line.split()[-1]
        sent: list[str] = []
        finished: list[str] = []
        stop = threading.Event()
        client = threading.Thread(target=_run_clients, args=(url, "internal_1t", sent, finished, stop))
        client.start()
        time.sleep(rng.uniform(0.5, 6.0))
        done_before = set(finished)
        proc.send_signal(sig)
        stop.set()
        _, err = proc.communicate(timeout=600)
        client.join(120)
        summary, rows = _common(t, run_dir, proc.returncode, err, f"serve {i} ({sig.name})")
        if summary is None or rows is None:
            continue
        ids = rows["client_id"].dropna()
        if not ids.is_unique or len(rows) != len(ids) or not set(ids) <= set(sent):
            t.bad(f"serve {i}: {len(rows)} rows for {len(set(sent))} requests sent")
            continue
        kept = rows.set_index("client_id").reindex(sorted(done_before))
        if kept["error"].isna().all() and len(kept) == len(done_before):
            t.counts["finished_rows_kept"] += 1
        else:
            t.bad(f"serve {i}: requests answered before the stop are missing or failed")
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sim", type=int, default=50)
    parser.add_argument("--live", type=int, default=20)
    parser.add_argument("--serve", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    args = parser.parse_args()
    # Started in the background (`cmd &`, nohup), this process ignores SIGINT, and so would the runs it starts
    # (an ignored signal stays ignored across exec; the harness keeps ignoring it): give them the default.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="signal-storm-"))
    tallies = []
    for storm, count in ((sim_storm, args.sim), (live_storm, args.live), (serve_storm, args.serve)):
        if count:
            started = time.monotonic()
            tally = storm(count, rng, tmp)
            print(tally.line() + f" ({time.monotonic() - started:.0f} s)", flush=True)
            for problem in tally.problems:
                print(f"  {problem}", flush=True)
            tallies.append(tally)
    if args.keep or any(t.counts["failures"] for t in tallies):
        print(f"run directories: {tmp}")
    else:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if any(t.counts["failures"] for t in tallies) else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
