"""A real serving engine installed by the project: llama.cpp's llama-server and a random-weight model.

`python -m harness.engine.build` (or `make engine`) builds both into a cache outside the work tree;
`harness.engine.server` starts and stops the server on a loopback port.
"""
