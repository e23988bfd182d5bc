"""The planner as the rebalancer calls it (harness/deploy/build.py `replanner`)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from harness.deploy.build import replanner


def test_an_infeasible_search_is_no_throughput_at_the_current_split(compose_cfg):
    """While the PrfaaS cluster is unreachable, one local instance cannot both prefill and decode: the
    free search finds nothing, and the answer keeps the deployment's split (it used to be None, None)."""
    cfg = compose_cfg(["deployment=prfaas_pd", "deployment.local.instances=1"])
    deployment = SimpleNamespace(prfaas_reachable=False, prefill={"local": []}, decode=[object()])
    plan = replanner(cfg, deployment)
    lengths = np.full(50, 4096.0)
    assert plan(lengths, 256.0, None) == (0.0, 0, 1, None)
    assert plan(lengths, 256.0, (0, 1, None)) == (0.0, 0, 1, None)
    deployment.prfaas_reachable = True  # every prefill remote: feasible again
    lam, n_prefill, n_decode, threshold = plan(lengths, 256.0, None)
    assert lam > 0 and (n_prefill, n_decode, threshold) == (0, 1, None)
