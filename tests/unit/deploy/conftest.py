"""Fakes for emulator unit tests: profiles with round numbers so timelines can be worked by hand."""

from __future__ import annotations

import pytest


class FakeProfile:
    """prefill_s = base + per_token * new tokens; decode step = step_s (+ per_seq_s per batched request)."""

    def __init__(self, base_s=0.0, per_token_s=0.001, step_s=0.1, per_seq_s=0.0, bs_max=4,
                 kv_per_token=1000.0, kv_state=0.0, kv_capacity_bytes=None):
        self.base_s = base_s
        self.per_token_s = per_token_s
        self.step_s = step_s
        self.per_seq_s = per_seq_s
        self.bs_max = bs_max
        self.kv_per_token = kv_per_token
        self.kv_state = kv_state
        self.kv_capacity_bytes = kv_capacity_bytes
        self.kv_bytes_per_token = kv_per_token
        self.state_bytes = kv_state

    def prefill_s(self, new_tokens, cached_tokens=0):
        return self.base_s + self.per_token_s * new_tokens

    def kv_bytes(self, tokens):
        return self.kv_state + self.kv_per_token * tokens

    def decode_step_s(self, batch, context_tokens):
        return self.step_s + self.per_seq_s * batch


@pytest.fixture
def fake_profile():
    return FakeProfile
