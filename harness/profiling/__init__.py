"""Calibrating an instance profile from a real OpenAI-compatible endpoint (`harness-profile`).

probes: timed requests (token-id prompts, streamed, the server's own timings when it sends them);
fit: least-squares fits of the cost model's own forms with their residuals; writer: the model
config YAML with provenance.
"""
