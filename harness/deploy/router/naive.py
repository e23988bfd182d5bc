"""Naive heterogeneous PD: every prefill on the remote compute-dense cluster, no length routing."""

from __future__ import annotations

from dataclasses import dataclass

from harness.deploy.router.base import ROUTE_PRFAAS, ClusterView, Route, RoutedRequest


@dataclass
class NaiveRouter:
    def route(self, request: RoutedRequest, view: ClusterView) -> Route:
        return ROUTE_PRFAAS

    def configure(self, threshold_tokens: float | None) -> None:
        """No threshold: everything goes remote."""
