"""The test processes keep Hydra's compositions (tests/conftest.py `_cache_compositions`): what a test
composes must be what Hydra composes in a process without that cache, the first time (kept) and the
second (a copy of what was kept), errors included; and a config file changed on disk is read again."""

from __future__ import annotations

import json
from pathlib import Path

import cli_zygote  # tools/cli_zygote.py, loaded by tests/conftest.py
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.schema import register_configs

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
CASES = [
    ["deployment=prfaas_pd", "workload.num_requests=7"],
    ["workload.num_requests=9", "deployment=prfaas_pd"],  # the same choices, another value: a reused defaults list
    ["experiment=paper_case_ci", "loadgen.rate_rps=2"],
    ["faults=link_drop", "+extra.key=1", "hydra.run.dir=/tmp/x"],
    ["deployment=nope"],  # errors: Hydra's own, every time
    ["loadgen.rate_rps=abc"],
]
def _composed(config_dir: Path, overrides: list[str]) -> str:
    register_configs()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return OmegaConf.to_yaml(compose("config", overrides=overrides, return_hydra_config=True))
    except Exception as err:
        return f"{type(err).__name__}: {err}"


def test_compositions_in_the_tests_are_hydras_own():
    # The same compositions in a process that never loads tests/conftest.py: Hydra as it ships.
    done = cli_zygote.run(["-m", "tests.e2e.plain_compose", str(CONF), json.dumps(CASES)], cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    plain = json.loads(done.stdout)
    for overrides, expected in zip(CASES, plain, strict=True):
        assert _composed(CONF, overrides) == expected, overrides  # composed here (or kept by an earlier test)
        assert _composed(CONF, overrides) == expected, overrides  # kept: a copy
    assert plain[4].startswith("MissingConfigException") and plain[5].startswith("ConfigCompositionException")


def test_a_config_file_changed_on_disk_is_read_again(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "config.yaml").write_text("a: 1\n")
    first = _composed(conf, [])
    (conf / "config.yaml").write_text("a: 22\n")  # another size: another key
    second = _composed(conf, [])
    assert "a: 1\n" in first and "a: 22\n" in second


def test_a_kept_composition_gets_hydras_now_evaluated_again():
    """Merging resolves Hydra's `${now:...}` into the config's resolver cache: a kept merge must not carry
    the first composition's time (here `now` counts its calls, registered as Hydra registers it)."""
    calls = []

    def now(pattern: str) -> str:
        calls.append(pattern)
        return f"{pattern}#{len(calls)}"

    caches = []
    for _ in range(2):
        register_configs()
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            OmegaConf.register_new_resolver("now", now, use_cache=True, replace=True)
            cfg = compose("config", overrides=["deployment=naive_hetero"], return_hydra_config=True)
            caches.append(dict(OmegaConf.get_cache(cfg).get("now", {})))
    assert caches[0] and caches[1] and caches[0].keys() == caches[1].keys()
    assert not set(caches[0].values()) & set(caches[1].values())  # evaluated again, not copied
