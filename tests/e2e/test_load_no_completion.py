"""harness-load and harness mode=url against a target that answers no request (HTTP 404 to all: a wrong
target.model; or a closed port): the run is recorded (every request one row, its error kept), exit 0,
and both commands print the same warning line, so a user who reads only the status notices."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import commands  # tests/commands.py
import pandas as pd
import pytest
from aiohttp import web

ROOT = Path(__file__).resolve().parents[2]
N = 3
SMALL = ["workload=fixed", f"workload.num_requests={N}", "workload.input_tokens=64", "workload.output_tokens=2",
         "loadgen.rate_rps=20", "loadgen.progress=false", "analysis.figures=false"]
COMMANDS = {"harness-load": ["-m", "harness.load"], "harness": ["-m", "harness", "mode=url"]}


@pytest.fixture
def not_found_url() -> Iterator[str]:
    """A server (in a thread of this process) answering 404 `model not found` to every completion."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, object] = {}

    def serve() -> None:
        asyncio.set_event_loop(loop)
        app = web.Application()

        async def completions(request):
            await request.read()
            return web.json_response({"error": {"message": "The model `nope` does not exist."}}, status=404)

        app.router.add_post("/v1/completions", completions)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
        box["url"] = "http://{}:{}".format(*runner.addresses[0][:2])
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(30)
    try:
        yield str(box["url"])
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("target", "first_error"), [("not_found_url", "HTTP 404: The model `nope` does not exist."),
                                                     ("closed_url", "ClientConnectorError: Cannot connect to host")])
def test_no_request_completed_is_recorded_and_said(tmp_path, request, command, target, first_error):
    url = request.getfixturevalue(target)
    run_dir = tmp_path / "run"
    proc = commands.run([*COMMANDS[command], f"hydra.run.dir={run_dir}", f"target.url={url}", "target.model=nope",
                           *SMALL], cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: no request completed")]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith(f"warning: no request completed ({N} failed; first error: {first_error}")
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert len(rows) == N and rows["error"].notna().all()  # errors are data: one row per request sent
