"""The testbed's pure parts: names and addresses, tbf limits, settings, layouts, routing, records, the CLI."""

from __future__ import annotations

import asyncio
import ipaddress

import numpy as np
import pandas as pd
import pytest

from harness.cli import with_testbed_preset
from harness.deploy.router.homogeneous import HomogeneousRouter
from harness.deploy.router.naive import NaiveRouter
from harness.deploy.router.prfaas import PrfaasRouter
from harness.deploy.router.prfaas_dynamic import PrfaasDynamicRouter
from harness.errors import InputError
from harness.testbed import netns
from harness.testbed.cli import parse_args
from harness.testbed.handoff import HandoffRecord, SlotPool
from harness.testbed.linkmon import LinkMonitor, egress_per_bin
from harness.testbed.router import FrontEnd, parse_body
from harness.testbed.run import join_records, link_timeseries
from harness.testbed.settings import Layout, layout_of
from harness.testbed.settings import TestbedSettings as Settings


@pytest.mark.parametrize("prefix", ["pfhtb0000", "pfhtbffff", "pfhtb1a2b"])
def test_every_name_carries_the_prefix_and_fits_an_interface_name(prefix):
    """Interface names are at most 15 characters; every object starts with the prefix."""
    topo = netns.Topology(prefix)
    names = [topo.remote_ns, topo.local_ns] + [n for v in topo.veths() for n in (v[0], v[2])]
    assert all(n.startswith(prefix + "-") for n in names)
    assert all(len(n) <= 15 for n in names[2:])


def test_addresses_are_distinct_slash30s_inside_the_benchmark_range():
    """Each pair shares a /30; every address is inside 198.18.0.0/15."""
    topo = netns.Topology("pfhtb01ff")
    bench = ipaddress.ip_network("198.18.0.0/15")
    seen = set()
    for *_, a, b in topo.veths():
        net_a = ipaddress.ip_interface(f"{a}/30").network
        assert net_a == ipaddress.ip_interface(f"{b}/30").network
        assert ipaddress.ip_address(a) in bench and net_a not in seen
        seen.add(net_a)


@pytest.mark.parametrize("bad", ["pfhtb", "pfhtb12345", "xyz1234", "pfhtbGGGG", "pfhtb0a1f-remote"])
def test_a_prefix_of_another_shape_is_refused(bad):
    with pytest.raises(InputError, match=r"testbed\.prefix"):
        netns.check_prefix(bad)


@pytest.mark.parametrize(("rate", "burst", "latency", "match"), [
    (0.0, 262144, 50, "link.capacity_gbps=0"), (-1, 262144, 50, "link.capacity_gbps"),
    (6.0, 10_000_000, 50, "link.capacity_gbps=6"), (1.0, 100_000, 50, "tbf_burst_bytes=100000"),
    (0.2, 262144, 0, "tbf_latency_ms=0")])
def test_rates_tbf_cannot_shape_are_one_line_input_errors(rate, burst, latency, match):
    with pytest.raises(InputError, match=match):
        netns.tbf_args(rate, burst, latency)


def test_tbf_rate_is_given_in_kbit():
    assert netns.tbf_args(0.2, 262144, 50)[:2] == ["rate", "200000kbit"]


def test_unknown_testbed_setting_names_the_key():
    with pytest.raises(InputError, match=r"testbed\.slotz"):
        Settings.from_mapping({"slotz": 2})
    with pytest.raises(InputError, match=r"testbed\.slots=0"):
        Settings.from_mapping({"slots": 0})


@pytest.mark.parametrize(("deployment", "roles"), [
    ("prfaas_pd", ("remote_prefill", "local_prefill", "decode")),
    ("homogeneous_pd", ("local_prefill", "decode")),
    ("naive_hetero", ("remote_prefill", "decode", "decode_1"))])
def test_each_deployment_config_maps_to_its_engines(compose_cfg, deployment, roles):
    assert layout_of(compose_cfg(("experiment=testbed_scale", f"deployment={deployment}")).deployment).roles == roles


def test_mode_testbed_selects_the_preset_unless_an_experiment_is_given():
    assert with_testbed_preset(["mode=testbed"]) == ["mode=testbed", "experiment=testbed_scale"]
    assert with_testbed_preset(["mode=testbed", "experiment=x"]) == ["mode=testbed", "experiment=x"]
    assert with_testbed_preset(["mode=sim"]) == ["mode=sim"]


def test_cli_parses_its_three_commands():
    assert parse_args(["up", "deployment=naive_hetero"]).overrides == ["deployment=naive_hetero"]
    assert parse_args(["down", "--all"]).all
    assert parse_args(["status"]).command == "status"
    with pytest.raises(SystemExit):
        parse_args(["sideways"])


@pytest.mark.parametrize(("body", "match"), [
    ({"prompt": "text"}, "token ids"), ({"prompt": []}, "token ids"), ({"prompt": [1, "a"]}, "token ids"),
    ({"prompt": [1, 2], "max_tokens": 0}, "max_tokens"), ([1, 2], "JSON object")])
def test_bodies_the_router_cannot_route_are_refused(body, match):
    with pytest.raises(ValueError, match=match):
        parse_body(body)


def test_a_nested_single_prompt_is_accepted():
    assert parse_body({"prompt": [[5, 6, 7]], "max_tokens": 4, "stream": True}) == ([5, 6, 7], 4, True)


def _front(router, layout, util=0.0, backlog_bytes=0):
    monitor = LinkMonitor("http://unused", "dev", 0.2, 0.1)
    if util:
        monitor.samples = [(0, 0), (1_000_000_000, int(util * 0.2e9 / 8))]
    monitor.in_flight_bytes = backlog_bytes
    return FrontEnd(router=router, handoff=None, monitor=monitor, layout=layout, link_gbps=0.2,  # type: ignore[arg-type]
                    model_name="m", t0_ns=0)


PRFAAS = Layout("prfaas_pd", True, True)


@pytest.mark.parametrize(("router", "layout", "tokens", "route"), [
    (HomogeneousRouter(), Layout("homogeneous_pd", False, True), 4000, "local"),
    (NaiveRouter(), Layout("naive_hetero", True, False), 100, "prfaas"),
    (PrfaasRouter(threshold_tokens=1024), PRFAAS, 1024, "local"),
    (PrfaasRouter(threshold_tokens=1024), PRFAAS, 1025, "prfaas")])
def test_routes_come_from_the_emulators_router_classes(router, layout, tokens, route):
    assert _front(router, layout).route(tokens) == route


def test_the_links_measured_state_reaches_the_bandwidth_aware_router():
    """The view carries the egress utilisation from the counters and the KV bytes in flight, in seconds."""
    router = PrfaasDynamicRouter(threshold_tokens=1024, adapt_threshold=False)
    busy = _front(router, PRFAAS, util=0.9, backlog_bytes=10**8)
    view = busy.view()
    assert view.egress_utilisation == pytest.approx(0.9, rel=1e-6)
    assert view.link_backlog_s == pytest.approx(10**8 * 8 / 0.2e9)


def test_slot_pool_hands_out_idle_slots_and_waits_when_none_is():
    async def scenario():
        pool = SlotPool(1)
        order = []
        async with pool.take() as slot:
            waiter = asyncio.create_task(_take(pool, order))
            await asyncio.sleep(0.01)
            assert not waiter.done() and pool.idle == 0
            order.append(("first", slot))
        await waiter
        return order

    async def _take(pool, order):
        async with pool.take() as slot:
            order.append(("second", slot))

    assert asyncio.run(scenario()) == [("first", 0), ("second", 0)]


def test_egress_per_bin_splits_counter_bytes_by_time():
    """A counter rising 25 MB/s for 2 s from t=0.5: 0.1 Gbit/s in bin [0,1) half full, 0.2 in [1,2)."""
    t0 = 10**9
    samples = [(t0 + int(t * 1e9), int(max(0.0, min(t, 2.5) - 0.5) * 25e6)) for t in np.arange(0, 3.01, 0.1)]
    gbps = egress_per_bin(samples, t0, np.array([0.0, 1.0, 2.0, 3.0]))
    assert gbps == pytest.approx([0.1, 0.2, 0.1], rel=1e-6)
    assert np.isnan(egress_per_bin(samples, t0, np.array([5.0, 6.0]))).all()


def test_router_records_join_client_rows_on_the_request_id():
    t0 = 1_000_000_000
    rec = HandoffRecord(request_id="7", input_tokens=2048, route="prfaas", prefill_instance="remote_prefill",
                        arrival_ns=t0 + 10**8, prefill_end_ns=t0 + 9 * 10**8, first_token_ns=t0 + 2 * 10**9,
                        kv_bytes_sent=192 + 9232 * 2048, kv_save_s=0.02, kv_transfer_s=0.8, kv_restore_s=0.004)
    frame = pd.DataFrame({"request_id": [7, 8], "ttft_s": [1.95, np.nan]})
    out = join_records(frame, [rec], t0)
    assert list(out["route"].astype(object).fillna("none")) == ["prfaas", "none"]
    assert out.loc[0, "kv_bytes_sent"] == 192 + 9232 * 2048 and out.loc[1, "kv_bytes_sent"] == 0
    assert out.loc[0, "prefill_end_s"] == pytest.approx(0.9) and out.loc[0, "server_ttft_s"] == pytest.approx(1.9)
    assert out.loc[0, "kv_transfer_s"] == 0.8 and np.isnan(out.loc[1, "kv_save_s"])


def test_homogeneous_pd_reports_zero_egress_and_a_link_run_reports_the_counters():
    ts = pd.DataFrame({"t_s": [0.0, 1.0], "bin_s": [1.0, 1.0], "egress_gbps": [np.nan, np.nan],
                       "link_capacity_gbps": [np.nan, np.nan]})
    assert list(link_timeseries(ts, [], 0, 0.2, has_link=False)["egress_gbps"]) == [0.0, 0.0]
    samples = [(0, 0), (2 * 10**9, 50_000_000)]
    out = link_timeseries(ts, samples, 0, 0.2, has_link=True)
    assert out["egress_gbps"].tolist() == pytest.approx([0.2, 0.2]) and (out["link_capacity_gbps"] == 0.2).all()


@pytest.mark.parametrize(("faults", "match"), [
    ([{"kind": "flood", "at_s": 1}], "kind='flood'"),
    ([{"kind": "kill_engine", "at_s": 1, "instance": "gpu7"}], "instance='gpu7'"),
    ([{"kind": "link_down", "at_s": -1}], "at_s"),
    ([{"kind": "link_down", "at_s": 1, "when": 2}], "faults\\[0\\].when")])
def test_bad_faults_name_the_key(faults, match):
    from harness.testbed.faults import parse_faults

    with pytest.raises(InputError, match=match):
        parse_faults(faults, ("remote_prefill", "local_prefill", "decode"))


def test_link_down_needs_a_link():
    from harness.testbed.faults import parse_faults

    with pytest.raises(InputError, match="link_down"):
        parse_faults([{"kind": "link_down", "at_s": 1}], ("local_prefill", "decode"))
    assert parse_faults([{"kind": "kill_engine", "at_s": 2, "instance": "decode"}], ("local_prefill", "decode"))


def test_probe_results_become_emulator_overrides():
    from harness.testbed.probes import fit_line, overrides_of

    base, slope = fit_line([1e6, 2e6, 4e6], [0.05 + 4e-8 * x for x in (1e6, 2e6, 4e6)])
    assert base == pytest.approx(0.05) and slope == pytest.approx(4e-8)
    doc = {"link": {"efficiency": 0.95612, "sharing": "fifo"},
           "deployment": {"kv_handoff": "store_and_forward", "kv_save_s": {"base_s": 0.003, "per_token_s": 7e-6},
                          "kv_restore_s": {"base_s": 0.0005, "per_token_s": 1.2e-6},
                          "file_bytes": {"base": 200.2, "per_token": 9232.0}}}
    assert overrides_of(doc, kv_per_token=9216.0) == [
        "deployment.kv_handoff=store_and_forward", "deployment.kv_save_s.base_s=0.003",
        "deployment.kv_save_s.per_token_s=7e-06", "deployment.kv_restore_s.base_s=0.0005",
        "deployment.kv_restore_s.per_token_s=1.2e-06", "deployment.kv_bytes_overhead.fixed_bytes=200",
        "deployment.kv_bytes_overhead.per_token_bytes=16", "link.efficiency=0.9561", "link.sharing=fifo"]
