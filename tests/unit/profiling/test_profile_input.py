"""harness-profile's bad settings: one stderr line naming the key (and the valid choices), exit status 2,
before the first probe is sent. A check that came after the probes would let them run first (minutes
against a real engine) and leave probes.parquet behind."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from pathlib import Path

import commands  # tests/commands.py
import pytest
from aiohttp import web

ROOT = Path(__file__).resolve().parents[3]
ARCH = ("profile.architecture={hidden_size: 64, layers: 2, q_heads: 4, kv_heads: 4, head_dim: 16, params_b: 0.01, "
        "weight_dtype_bytes: 2, kv_dtype_bytes: 2}")


def run_profile(tmp_path: Path, url: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    return commands.run(["-m", "harness.profile", f"hydra.run.dir={tmp_path / 'run'}", f"target.url={url}",
                           *overrides], cwd=ROOT, timeout=120)


@pytest.mark.parametrize(
    ("override", "message"),
    [("profile.decode.kind=foo", "profile.decode.kind='foo'; valid: per_batch, linear"),
     ("profile.name=../../etc/x", "profile.name='../../etc/x' must be a plain file name")],
)
def test_a_bad_design_is_refused_before_the_server_is_asked(one_error_line, tmp_path, closed_url, override, message):
    line = one_error_line(run_profile(tmp_path, closed_url, override, "profile.slots=2"))
    assert message in line  # not "no answer at /v1/models": the server was never asked
    assert not (tmp_path / "run" / "probes.parquet").exists()
    assert not list(tmp_path.rglob("*.yaml")) or all(".hydra" in p.parts for p in tmp_path.rglob("*.yaml"))


@pytest.mark.parametrize(
    ("override", "message"),
    [("profile.hardware=foo", "profile.hardware='foo': no conf/hardware/foo.yaml to check the profile on; valid: "),
     ("profile.prefill.repeats=0", "profile.prefill.repeats must be an integer >= 1, got 0"),
     ("profile.architecture={hidden_size: 64}", "profile.architecture is missing layers"),
     ("profile.prefill.lengths=[-1,128,256]", "profile.prefill.lengths must be a non-empty list of integers >= 1"),
     ("profile.prefill.lengths=[128,256]", "profile.prefill.lengths needs more than 2 distinct lengths"),
     ("profile.decode.batches=[1,4]", "profile.decode: batch 4 is outside 1..2"),  # with profile.slots=2 below
     ("profile.name=a/b", "profile.name='a/b' must be a plain file name")],
)
def test_each_bad_setting_is_named(override, message):
    """The same check the command runs first (the test above: before the server is asked), in process."""
    from hydra import compose, initialize_config_dir

    from harness.errors import InputError
    from harness.profiling.design import check_design
    from harness.schema import register_configs

    register_configs("profile")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("profile", overrides=["target.url=http://127.0.0.1:9", override, "profile.slots=2"])
    with pytest.raises(InputError) as err:
        check_design(cfg)
    assert message in str(err.value)


def test_the_hardware_error_lists_the_hardware_configs(one_error_line, tmp_path, closed_url):
    line = one_error_line(run_profile(tmp_path, closed_url, "profile.hardware=foo"))
    assert line.endswith("valid: " + ", ".join(sorted(p.stem for p in (ROOT / "conf" / "hardware").glob("*.yaml"))))


class _Server:
    """/v1/models and /props of a llama-server with `slots` slots and a model file elsewhere; counts
    the completions (probes) it is sent and answers none of them."""

    def __init__(self, slots: int) -> None:
        self.slots, self.probes = slots, 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()

        async def models(request):
            return web.json_response({"data": [{"id": "m"}]})

        async def props(request):
            return web.json_response({"total_slots": self.slots, "model_path": "/nonexistent/model.gguf",
                                      "default_generation_settings": {"n_ctx": 65536}})

        async def completions(request):
            self.probes += 1
            return web.json_response({"error": {"message": "not in this test"}}, status=500)

        app.router.add_get("/v1/models", models)
        app.router.add_get("/props", props)
        app.router.add_post("/v1/completions", completions)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())

    def __enter__(self) -> _Server:
        self.thread.start()
        assert self.ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [((ARCH, "profile.decode.batches=[1,4]"), "profile.decode: batch 4 is outside 1..2 (the engine's slots); "
                                              "2 slots declared by"),
     ((), "profile.architecture is not set and the server's model file (/nonexistent/model.gguf) is not on "
          "this machine")],
)
def test_what_needs_the_servers_answer_is_checked_before_the_first_probe(one_error_line, tmp_path, overrides, message):
    with _Server(slots=2) as server:
        line = one_error_line(run_profile(tmp_path, server.url, *overrides))
    assert message in line
    assert server.probes == 0
    assert not (tmp_path / "run" / "probes.parquet").exists()
