"""benchmarks/simulator_process.py itself: start, kill, restart on the same ports, stop."""

from __future__ import annotations

import httpx
import pytest

from benchmarks.simulator_process import SimulatorFactory


def test_kill_restart_same_ports_stop(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(profile="llama31-8b-1x-h100", admin_key="k", seed=3)
    base, gpu = sim.base_url, sim.gpu_metrics_url
    first_pid = sim.pid
    assert sim.running
    assert httpx.post(
        f"{base}/set_internal_state",
        json={"server_args": {"spectower_spec_max_bs": 2}},
        headers=sim.admin_headers,
        timeout=10,
    ).json() == [True]
    sim.kill()
    assert not sim.running
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/health", timeout=2)
    sim.restart()
    assert sim.running and sim.pid != first_pid
    assert (sim.base_url, sim.gpu_metrics_url) == (base, gpu)
    assert httpx.get(f"{base}/health", timeout=5).status_code == 200
    assert httpx.get(gpu, timeout=5).status_code == 200
    # a restarted server starts from its launch state, like a restarted SGLang (the knob is not persisted)
    state = httpx.get(f"{base}/server_info", timeout=5).json()["internal_states"][0]
    assert state["spectower"]["spec_max_bs"] == 64
    # keys survive the restart
    assert (
        httpx.post(
            f"{base}/set_internal_state", json={"server_args": {"spectower_spec_max_bs": 2}}, timeout=10
        ).status_code
        == 401
    )
    sim.stop()
    assert not sim.running and sim.returncode == 0


def test_context_manager_stops(simulator_factory: SimulatorFactory) -> None:
    from benchmarks.simulator_process import SimulatorProcess

    with SimulatorProcess(profile="llama31-8b-1x-h100") as sim:
        assert httpx.get(f"{sim.base_url}/health", timeout=5).status_code == 200
    assert not sim.running


def test_a_port_taken_between_its_pick_and_the_childs_bind_is_picked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race a full suite lost a fleet fixture to: free_port() hands out a port that something else binds
    before the simulator does. The child refuses it ("Address already in use"); the start picks again."""
    import socket

    from benchmarks import simulator_process

    taker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taker.bind(("127.0.0.1", 0))
    taker.listen()
    taken = taker.getsockname()[1]
    picks = iter([taken])
    real = simulator_process.free_port
    monkeypatch.setattr(simulator_process, "free_port", lambda: next(picks, None) or real())
    sim = simulator_process.SimulatorProcess()
    try:
        assert sim.port != taken and httpx.get(f"{sim.base_url}/health", timeout=5).status_code == 200
    finally:
        sim.close()
        taker.close()


def test_a_port_held_by_a_server_that_answers_health_is_not_taken_for_the_simulator(
    simulator_factory: SimulatorFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh clone's suite lost the fleet fixture to this: free_port() handed a simulator the port another
    simulator's dcgm-exporter already held. That exporter answers /health, so the start looked done, and
    /server_info came back 404 (a KeyError in every fleet test). The start now waits for the child's own
    line that it listens on its port; the child exits on the taken port, and the start picks again."""
    from benchmarks import simulator_process

    holder = simulator_factory(profile="llama31-8b-1x-h100")
    taken = holder.gpu_metrics_port
    assert httpx.get(f"http://127.0.0.1:{taken}/health", timeout=5).status_code == 200
    picks = iter([taken])
    real = simulator_process.free_port
    monkeypatch.setattr(simulator_process, "free_port", lambda: next(picks, None) or real())
    sim = simulator_factory(profile="llama31-8b-1x-h100")
    assert sim.port != taken
    assert httpx.get(f"{sim.base_url}/server_info", timeout=5).json()["max_running_requests"] > 0


def test_a_dead_url_stays_dead_a_simulator_cannot_take_its_port() -> None:
    """A fresh clone's suite (stop 48) lost two fleet tests to this: the fleet's "down" replica was a port
    from free_port(), which another xdist worker's simulator then bound, so it answered ("wrong key") where
    the tests wanted "cannot reach". A dead_url's port stays bound, not listening: refused, and not free."""
    import socket
    from urllib.parse import urlsplit

    from benchmarks import simulator_process
    from tests.conftest import dead_url

    url = dead_url()
    port = urlsplit(url).port
    assert port is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OSError), probe:  # what a server starting on that port meets: address in use
        probe.bind(("127.0.0.1", port))
    picked = {simulator_process.free_port() for _ in range(200)}
    assert port not in picked


def test_a_port_taken_is_read_from_the_clis_line_and_from_uvicorns_own() -> None:
    """uvicorn says "address already in use" in lower case; the start's retry read only the system's words,
    so a full suite's fleet test failed on a port taken between its pick and the child's bind (2026-12-06)."""
    from benchmarks.simulator_process import port_taken

    cli = "error: --port: cannot listen on 127.0.0.1:35643 (Address already in use)"
    uvicorn = (
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 35643): "
        "address already in use"
    )
    assert port_taken(cli) and port_taken(uvicorn)
    assert not port_taken("error: --profile: no such profile")
