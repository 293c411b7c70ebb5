"""Fleet: every replica on one screen (one sortable row each), one flip for all of them, fleet totals.

The fleet is one the config file names (``[fleets.NAME]``, the CLI's ``--fleet``: control/fleet.py), or
every server the database has collected. Each row combines what the collector stored (console/data.py)
with what the replica says about its knob now (read at once for all of them, a short deadline each);
a replica that does not answer shows since when it has not (its newest sample). The flip goes through the
same ``control.fleet_ops`` as `control set --fleet`: one confirmation, every replica written at once, each
read back and audited, one row per replica.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from .. import actions, charts, data, estimate, settings
from . import common
from . import control as control_view

if TYPE_CHECKING:
    from ...control.knob_state import KnobState, Target
    from ...storage import Database

ALL_SERVERS = "All collected servers"
FLEET_PARAM = "fleet"
LIVE_TIMEOUT_S = 3.0
TOTALS_MAX_POINTS = 300
CHOICES = ("off", "on", "threshold N", "release")
PENDING_KEY, RESULT_KEY = "fl_pending", "fl_result"
FORM_KEYS = ("fl_mode", "fl_n", "fl_reason", "fl_hold")


def render() -> None:
    st.title("Fleet")
    db = common.page_database()
    if db is None:
        return
    creds = control_view.credentials()
    replicas = _choose_fleet(db)
    if not replicas:
        return
    st.fragment(run_every=settings.refresh_s())(common.shows_database_errors(_live))(replicas)
    if creds.operator is None:
        st.warning(f"**Read-only.** {creds.why_not}.", icon=":material/lock:")
    else:
        _flip_form(replicas, creds.operator)
    _show_result()


def _choose_fleet(db: Database) -> list[str]:
    """The replicas of the fleet chosen (``?fleet=NAME`` keeps it in the page's address); [] after saying
    why there are none."""
    from ...control import fleet as fleets

    try:
        names = sorted(fleets.defined())
    except fleets.FleetError as exc:
        st.error(str(exc))
        names = []
    options = [*names, ALL_SERVERS]
    if "fl_fleet" not in st.session_state:
        wanted = st.query_params.get(FLEET_PARAM)
        st.session_state["fl_fleet"] = wanted if wanted in options else options[0]
    helped = "[fleets.NAME] of spectower.toml (as `--fleet NAME`), or every collected server"
    choice = st.selectbox("Fleet", options, key="fl_fleet", help=helped)
    if choice == ALL_SERVERS:
        st.query_params.pop(FLEET_PARAM, None)
        return [str(url) for url in data.servers(db)["url"]]
    st.query_params[FLEET_PARAM] = choice
    try:
        fleet = fleets.named(choice)
    except fleets.FleetError as exc:
        st.error(str(exc))
        return []
    st.caption(f"{len(fleet.replicas)} replicas from {fleet.source}")
    return list(fleet.replicas)


def _live(replicas: list[str]) -> None:
    db = common.store()
    win = common.window()
    states = dict(actions.read_fleet(replicas, None, LIVE_TIMEOUT_S))
    rows = [replica_row(db, url, states[url], win) for url in replicas]
    frame = pd.DataFrame(rows)
    st.caption(f"Live · refreshes every {settings.refresh_s():g} s · click a column to sort")
    st.dataframe(frame.drop(columns=["last_sample_ts"]), width="stretch", hide_index=True)
    for row in rows:
        if row["status"] != "answering":
            st.warning(f"{row['replica']}: {row['status']}", icon=":material/cloud_off:")
    st.session_state["fl_states"] = {url: s for url, s in states.items() if not isinstance(s, BaseException)}
    _totals(db, replicas, win)


def replica_row(
    db: Database, url: str, state: KnobState | BaseException, win: common.Window
) -> dict[str, Any]:
    """One replica's row: what the collector stored (its newest sample, the live speedup over the window)
    and what the replica says about its knob now."""
    server = _server(db, url)
    latest = None if server is None else data.latest_engine(db, int(server["id"]))
    last_ts = None if latest is None else latest["ts"]
    answering = not isinstance(state, BaseException)
    if answering:
        status = "answering"
    elif last_ts is None:
        status = "not answering, never collected"
    else:
        status = f"stopped answering since {common.clock(last_ts)} ({common.ago(last_ts)})"
    running = data.running_per_rank(latest)  # the live speedup's bins are one DP rank's batch
    newest = latest or {}
    row: dict[str, Any] = {
        "replica": url, "status": status,
        "output tok/s": common.rounded(newest.get("output_tok_s")),
        "running": common.rounded(newest.get("num_running_reqs")),
        "queued": common.rounded(newest.get("num_queue_reqs")),
        # which replica's latency went: the newest scrape interval's p99s, in ms
        "TTFT p99 ms": common.rounded(data.to_ms(newest.get("ttft_p99_s"))),
        "ITL p99 ms": common.rounded(data.to_ms(newest.get("itl_p99_s")), 1),
        "knob": _knob_text(state, latest), "owner": _owner_text(db, state),
        "speedup now": _speedup_text(db, server, running, win),
        "accept length": _accept_text(latest),
        "GPUs": _gpu_text(db, url), "last_sample_ts": last_ts,
    }  # fmt: skip
    return row


def _server(db: Database, url: str) -> pd.Series | None:
    servers = data.servers(db)
    match = servers[servers["url"].str.rstrip("/") == url.rstrip("/")]
    return None if match.empty else match.iloc[0]


def _accept_text(latest: dict[str, Any] | None) -> str | None:
    """The accept length as the Overview reads it: "gated" where the replica drafts nothing now (its 1.00
    read as a measurement), else the value, as text so that the column holds one type."""
    if latest is not None and data.gated_reason(latest):
        return "gated"
    value = common.rounded((latest or {}).get("spec_accept_length"), 2)
    return None if value is None else f"{value:.2f}"


def _knob_text(state: KnobState | BaseException, latest: dict[str, Any] | None) -> str:
    if isinstance(state, BaseException):
        value = None if latest is None else latest.get("spec_max_bs")
        return "?" if value is None or pd.isna(value) else f"{int(value)} (as last collected)"
    label = estimate.knob_label(state.spec_max_bs, state.max_running_requests)
    return f"{state.spec_max_bs} ({label})"


def _owner_text(db: Database, state: KnobState | BaseException) -> str:
    """The owner as the server reports it, with the person when an operator's lock holds."""
    from ...control.audit import lock_holder

    if isinstance(state, BaseException):
        return "?"
    owner = state.owner or "unknown"
    if state.lock and state.lock.get("writer") == "manual":
        event = lock_holder(db, state)
        who = event.actor.split(":", 1)[1] if event is not None else "someone (not in this database)"
        return f"{owner}: {who}"
    return owner


def _speedup_text(db: Database, server: pd.Series | None, running: Any, win: common.Window) -> str:
    if server is None:
        return "—"
    now = data.speedup_at(data.live_speedup(db, int(server["id"]), win.t0, win.t1), running)
    if now is None:
        return "not measured yet"
    interval = "" if now["lo"] is None else f" ({estimate.ratio_interval_text(now['lo'], now['hi'])})"
    return f"x{now['speedup']:.2f}{interval} at batch {now['batch_size']}"


def _gpu_text(db: Database, url: str) -> str:
    """Utilisation of the GPUs collected on the replica's host (a loopback URL: this machine), named by
    that host: ``gpu-node-3: 8 GPUs 71 % (max 93 %)``."""
    from ...control.fleet import replica_hosts

    gpus = data.latest_gpu(db)
    if gpus.empty:
        return "—"
    parts = []
    for host in replica_hosts(url):
        util = gpus.loc[gpus["host"] == host, "gpu_util_pct"]
        if not util.dropna().empty:
            parts.append(f"{host}: {len(util)} GPUs {util.mean():.0f} % (max {util.max():.0f} %)")
    return "; ".join(parts) or "—"


def _totals(db: Database, replicas: list[str], win: common.Window) -> None:
    servers = data.servers(db)
    fleet = servers[servers["url"].str.rstrip("/").isin(replicas)]
    totals = data.fleet_totals(db, [int(i) for i in fleet["id"]], win.t0, win.t1, TOTALS_MAX_POINTS)
    # a fleet younger than the range is drawn from its first replica's first sample, as the other pages draw
    # a server: a fresh demo's fleet was a sliver at the right edge of its hour
    x_range = charts.data_window(win.t0, win.t1, fleet["first_seen"].min(), totals)
    left, right = st.columns(2)
    with left:
        fig = charts.timeseries(totals, {"output_tok_s": "tokens/s, all replicas"}, "Fleet output tokens/s",
                                "tok/s", band=False, x_range=x_range)  # fmt: skip
        common.chart(fig, totals, "fleet_tok", "fleet-totals")
    with right:
        shown = {"replicas_drafting": "drafting", "replicas_reporting": "reporting"}
        fig = charts.timeseries(totals, shown, "Replicas drafting", "replicas", band=False,
                                x_range=x_range)  # fmt: skip
        common.chart(fig, totals, "fleet_drafting", "fleet-drafting")


# ------------------------------------------------------------------------------------------ the flip


def _flip_form(replicas: list[str], operator: settings.Operator) -> None:
    st.subheader("Flip the whole fleet")
    mode = st.radio("Every replica", CHOICES, horizontal=True, key="fl_mode")
    n = None
    if mode == "threshold N":
        n = st.number_input("N — draft while running requests ≤ N", min_value=1, value=16, step=1, key="fl_n")
    hold = st.text_input("Hold (e.g. 30m or 2h; empty = until released)", key="fl_hold",
                         disabled=mode == "release")  # fmt: skip
    reason = st.text_input("Reason (required, recorded in each replica's audit row)", key="fl_reason")
    if st.button("Review fleet change", type="primary", key="fl_review"):
        _review(replicas, mode, n, hold, reason)
    pending = st.session_state.get(PENDING_KEY)
    if pending:
        _confirm(pending, operator)


def _review(replicas: list[str], mode: str, n: int | None, hold: str, reason: str) -> None:
    hold_s, hold_error = control_view.hold_seconds(hold) if mode != "release" else (None, None)
    if hold_error:
        st.error(hold_error)
        return
    if not reason.strip():
        st.error("Reason: required — say why every replica changes (it goes into each audit row).")
        return
    target: Target | None = None if mode == "release" else ("off" if mode == "off" else "on" if mode == "on"
                                                            else int(n or 1))  # fmt: skip
    states: dict[str, KnobState] = st.session_state.get("fl_states", {})
    preview = [_preview_row(url, states.get(url), target) for url in replicas]
    st.session_state[PENDING_KEY] = {"mode": mode, "target": target, "reason": reason.strip(),
                                     "hold_s": hold_s, "preview": preview}  # fmt: skip
    st.session_state.pop(RESULT_KEY, None)


def _preview_row(url: str, state: KnobState | None, target: Target | None) -> dict[str, Any]:
    """What the replica now holds and what the change makes of it there (``resolve_target``)."""
    from ...control.knob_state import KnobError, resolve_target

    if state is None:
        return {"replica": url, "now": None, "new": None, "problem": "not answering"}
    if target is None:
        return {"replica": url, "now": state.spec_max_bs, "new": "released", "problem": None}
    try:
        new, problem = resolve_target(state, target), None
    except KnobError as exc:
        new, problem = None, str(exc)
    return {"replica": url, "now": state.spec_max_bs, "new": new, "problem": problem}


def _confirm(pending: dict[str, Any], operator: settings.Operator) -> None:
    """One confirmation for the whole fleet. Every replica is written (as `control set --fleet --yes`),
    also one the preview could not read: it may answer now, and if not its attempt is audited and named."""
    replicas = [row["replica"] for row in pending["preview"]]
    doubtful = [row for row in pending["preview"] if row["problem"] is not None]
    what = "release every lock" if pending["target"] is None else f"set **{pending['mode']}**"
    st.warning(f"**Confirm:** {what} on **{len(replicas)}** replicas at once as **{operator.actor}** "
               f"({len(doubtful)} of them cannot be set as they read now). Reason: _{pending['reason']}_",
               icon=":material/warning:")  # fmt: skip
    st.dataframe(pd.DataFrame(pending["preview"]), width="stretch", hide_index=True)
    ok, cancel = st.columns([1, 6])
    if ok.button("Confirm", type="primary", key="fl_confirm"):
        with st.spinner(f"Writing {len(replicas)} replicas at once and reading each back…"):
            started = time.monotonic()
            if pending["target"] is None:
                rows = actions.release_fleet(settings.db_url(), replicas, pending["reason"], operator)
            else:
                rows = actions.apply_fleet(settings.db_url(), replicas, pending["target"], pending["reason"],
                                           operator, hold_s=pending["hold_s"])  # fmt: skip
        st.session_state[RESULT_KEY] = {"rows": rows, "seconds": time.monotonic() - started}
        st.session_state.pop(PENDING_KEY, None)
        for key in FORM_KEYS:
            st.session_state.pop(key, None)
        st.rerun()
    if cancel.button("Cancel", key="fl_cancel"):
        st.session_state.pop(PENDING_KEY, None)
        st.rerun()


def _show_result() -> None:
    result = st.session_state.get(RESULT_KEY)
    if not result:
        return
    rows = result["rows"]
    good = sum(1 for row in rows if row["confirmed"])
    summary = f"confirmed by read-back on {good} of {len(rows)} replicas in {result['seconds']:.1f} s"
    if good == len(rows):
        st.success(f"**Fleet change {summary}.** An audit row per replica.", icon=":material/check_circle:")
    else:
        st.error(f"**Partial: {summary}.** An audit row per replica.", icon=":material/error:")
        for row in rows:
            if not row["confirmed"]:
                st.markdown(f"- `{row['replica']}` not confirmed: {row['why']}")
    st.dataframe(pd.DataFrame(rows), width="stretch", hide_index=True)
