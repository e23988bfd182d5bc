"""Typed config schemas that more than one part reads.

The planner and the emulated deployments both read the deployment, cluster, link, cache, fault and
rebalancer settings; their schemas live here, below both, so neither imports the other for them.
`harness/schema.py` registers every schema with Hydra's ConfigStore.
"""
