"""Live mode: an emulated deployment on the wall clock behind an OpenAI-compatible aiohttp server.

`server.start_server(cfg)` builds the deployment on a scaled wall clock and serves
`/v1/completions`, `/v1/chat/completions`, `/v1/models`, `/health` and `/metrics`; `harness-serve`
runs it until interrupted, `python -m harness mode=live` drives it with the load generator.
"""
