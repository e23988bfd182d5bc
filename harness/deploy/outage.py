"""PrfaaS outages: the cross-DC path goes down and work stuck behind it is prefilled again locally.

Mixed into `Deployment` (harness/deploy/deployment.py), whose state it reads.
"""

from __future__ import annotations

from harness.deploy.job import Job
from harness.deploy.router.base import LOCAL, PRFAAS
from harness.deploy.state import DeploymentState


class OutageHandling(DeploymentState):
    def set_prfaas_reachable(self, reachable: bool) -> None:
        """A PrfaaS outage: the cross-DC path goes down; work stuck behind it is re-prefilled locally.

        The remote cluster keeps computing what it had (its cache fills), but nothing it makes can
        reach the decode side, so every request routed there whose KV has not landed starts over in
        the local PD cluster (or waits, when there is no local prefill, as in naive heterogeneous).
        When it comes back, held requests are routed again.
        """
        if reachable == self.prfaas_reachable:
            return
        self.prfaas_reachable = reachable
        links = {"cross": self.cross_link, "reverse": self.reverse_link}
        for key, link in links.items():
            if link is None:
                continue
            if not reachable:
                self._saved_capacity[key] = link.capacity_gbps
                link.set_capacity(0.0)
            else:
                link.set_capacity(self._saved_capacity.pop(key, link.capacity_gbps))
        if not reachable:
            for job in list(self.in_flight.values()):
                stuck = job.route == PRFAAS and job.kv_ready_s != job.kv_ready_s  # KV not landed (NaN)
                fetching = bool(job.flows) and job.prefill_pending and job.prefill_start_s != job.prefill_start_s
                if stuck or fetching:
                    self._restart(job)
        else:
            held, self.held = self.held, []
            for job in held:
                self._route(job)
        if self.rebalancer is not None:
            self.rebalancer.nudge()

    def _restart(self, job: Job) -> None:
        """Abandon a request's current attempt and route it again (the router now sees no PrfaaS)."""
        job.abandoned = True
        for link in (self.cross_link, self.reverse_link, self.rdma_link):
            if link is not None:
                for flow in job.flows:
                    link.cancel(flow)
        for instance in self.prefill[PRFAAS] + self.prefill[LOCAL]:
            instance.withdraw(job)
        pool = self.pools.get(job.route)
        if pool is not None and job.transfer_pending:
            pool.release_transfer(job.kv_bytes)
        retry = Job(job.request, attempt=job.attempt + 1)
        self.in_flight[job.request.request_id] = retry
        self._route(retry)
