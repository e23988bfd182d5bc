"""harness-load's bad input: one stderr line naming the key, exit status 2, nothing sent.

The target is a port bound on 127.0.0.1 that does not listen (a refused connection): a check that
came too late would let the run go on and end with status 0 (every request failed) or crash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import commands  # tests/commands.py
import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["workload=fixed", "workload.num_requests=2", "workload.input_tokens=64", "workload.output_tokens=2",
         "loadgen.progress=false", "analysis.figures=false"]


def run_load(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return commands.run(["-m", "harness.load", f"hydra.run.dir={tmp_path / 'run'}", *SMALL, *overrides],
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize(
    ("override", "message"),
    [("target.extra_body=5", "target.extra_body must be a mapping"),
     ("target.extra_body=[1,2]", "target.extra_body must be a mapping"),
     ("target.headers=5", "target.headers must be a mapping"),
     ("target.headers={X-Tenant: [a]}", "target.headers.X-Tenant must be a string or a number")],
)
def test_target_containers_of_the_wrong_shape_exit_2(one_error_line, tmp_path, closed_url, override, message):
    line = one_error_line(run_load(tmp_path, f"target.url={closed_url}", "target.model=m", override))
    assert message in line
    assert not (tmp_path / "run" / "requests.parquet").exists()  # refused before the run


@pytest.mark.parametrize(
    ("overrides", "message"),
    [(("mode=foo",), "error: mode='foo': harness-load drives the emulated deployment behind HTTP in this process "
                     "(mode=live) or the endpoint at target.url (mode=url); valid: live, url"),
     (("mode=sim",), "valid: live, url (without mode: url when target.url is set, else live); a sim run is "
                     "`harness mode=sim`"),
     (("mode=sim", "target.url={url}"), "error: mode='sim': harness-load drives"),
     (("mode=live", "target.url={url}"), "error: mode=live starts the emulated deployment and drives it, not "
                                         "target.url=")],
)
def test_a_mode_harness_load_does_not_run_exits_2(one_error_line, tmp_path, closed_url, overrides, message):
    line = one_error_line(run_load(tmp_path, *(o.format(url=closed_url) for o in overrides)))
    assert message in line
    assert not (tmp_path / "run" / "requests.parquet").exists()


def test_without_mode_the_url_decides():
    from omegaconf import OmegaConf

    from harness.load import choose_mode

    def cfg(mode, url=None):
        return OmegaConf.create({"mode": mode, "target": {"url": url}})

    assert choose_mode(cfg("sim"), given=False) == "live"  # the config's default mode: not a choice
    assert choose_mode(cfg("sim", "http://h:1"), given=False) == "url"
    assert choose_mode(cfg("url", "http://h:1"), given=True) == "url"
    assert choose_mode(cfg("live"), given=True) == "live"
