"""`python -m tests.e2e.plain_compose <config dir> <JSON list of override lists>`: each composed as Hydra
composes it (`return_hydra_config=True`, as YAML; an error as `<type>: <message>`), printed as one JSON list.

tests/e2e/test_compose_cache.py runs it forked from the CLI zygote (tools/cli_zygote.py), a process that
never loads tests/conftest.py (the zygote imports third-party modules only, Hydra unchanged): the
compositions of Hydra as it ships, to compare with the test processes' kept ones."""

from __future__ import annotations

import json
import sys

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.schema import register_configs


def main() -> None:
    config_dir, cases = sys.argv[1], json.loads(sys.argv[2])
    out = []
    for overrides in cases:
        register_configs()
        try:
            with initialize_config_dir(config_dir=config_dir, version_base=None):
                out.append(OmegaConf.to_yaml(compose("config", overrides=overrides, return_hydra_config=True)))
        except Exception as err:
            out.append(f"{type(err).__name__}: {err}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
