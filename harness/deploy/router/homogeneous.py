"""Homogeneous PD: every request is prefilled in the local PD cluster."""

from __future__ import annotations

from dataclasses import dataclass

from harness.deploy.router.base import ROUTE_LOCAL, ClusterView, Route, RoutedRequest


@dataclass
class HomogeneousRouter:
    def route(self, request: RoutedRequest, view: ClusterView) -> Route:
        return ROUTE_LOCAL

    def configure(self, threshold_tokens: float | None) -> None:
        """No threshold: nothing leaves the cluster."""
