"""Emulated deployments: instances, links and routers built from the cost model, on an injected clock."""
