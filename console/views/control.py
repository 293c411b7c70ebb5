"""Control: the knob per server (off / on / threshold N / learn), reason, confirmation, read-back, audit."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import pandas as pd
import streamlit as st
from spectower.console import actions, data, estimate, settings
from spectower.console.views import common

MODES = ("off", "on", "threshold N", "learn")
PENDING_KEY = "ctl_pending"
RESULT_KEY = "ctl_result"
POLICY_STALE_S = 60.0  # a policy runner that has not written its state for this long is not running


def _secrets() -> Any:
    try:
        return st.secrets
    except Exception:
        return None


def render() -> None:
    st.title("Control")
    eng = common.engine()
    if common.no_data_notice(eng) or eng is None:
        return
    creds = settings.operator_credentials(secrets=_secrets())
    operator = creds.operator
    if operator is None:
        st.warning(f"**Read-only.** {creds.why_not}.", icon=":material/lock:")
    else:
        st.success(
            f"Acting as **{operator.actor}**. Every change is confirmed, read back and audited.",
            icon=":material/verified_user:",
        )
    servers = data.servers(eng)
    server = common.server_choice(servers, key="ctl_server")
    url = str(server["url"])
    max_running = None if pd.isna(server.get("max_running_requests")) else int(server["max_running_requests"])
    latest = data.latest_engine(eng, int(server["id"]))
    knob = None if latest is None or latest["spec_max_bs"] is None else int(latest["spec_max_bs"])
    setter = data.last_setter(eng, url)
    title = "Speculation (as last collected)"
    done = st.session_state.get(RESULT_KEY)
    if (
        done
        and done["server_url"] == url
        and done["confirmed"]
        and (latest is None or done["ts"] > latest["ts"])
    ):
        # the server confirmed a newer value than the collector has recorded yet: show what the server said
        knob, title = int(done["read_back"]), "Speculation (read back from the server just now)"

    cols = st.columns([2, 1, 1])
    with cols[0]:
        stale = latest is None or common.is_stale(latest["ts"])
        common.big_number(
            title,
            estimate.knob_label(knob, max_running).upper(),
            f"spec_max_bs = {knob} · max_running_requests = {max_running} · "
            + (
                f"set by {setter['actor']} {common.ago(setter['ts'])}"
                if setter
                else "never set via spectower"
            )
            + (f" · STALE: collected {common.ago(latest['ts'] if latest else None)}" if stale else ""),
            stale=stale,
        )
    _policy_status(eng, url, cols[1])
    with cols[2]:
        if st.button("Read live value from the server", key="ctl_read"):
            try:
                st.session_state["ctl_live"] = actions.read_live(url, operator)
            except Exception as exc:  # an unreachable server is shown, not raised
                st.session_state["ctl_live"] = {"error": str(exc)}
        live = st.session_state.get("ctl_live")
        if live:
            if "error" in live:
                st.error(live["error"])
            else:
                st.metric("Live spec_max_bs", str(live.get("spec_max_bs")), help=str(live.get("mode")))

    if operator is not None:
        _change_form(url, knob, max_running, operator)
    _show_result()
    _audit_trail(url)


def _policy_status(eng: Any, url: str, where: Any) -> None:
    states = data.policy_states(eng)
    with where:
        row = None if states.empty else states[states["server_url"] == url]
        if row is None or row.empty:
            st.metric("Policy", "not running")
            return
        r = row.iloc[0]
        now = time.time()
        running = now - float(r["updated_ts"]) < POLICY_STALE_S and bool(r["mode"])
        paused = not pd.isna(r["paused_until"]) and float(r["paused_until"]) > now
        status = "paused" if paused else ("in control" if running else "not running")
        mode = common.text_or(r["mode"], "none")
        st.metric(
            "Policy",
            status,
            help=f"mode {mode}; state written {common.ago(r['updated_ts'])}"
            + ("; a manual set paused it: release it under 'learn'" if paused else ""),
        )


def _target(mode: str, n: int | None, max_running: int | None) -> tuple[int | None, str | None]:
    """The integer to set, or (None, error naming the field)."""
    if mode == "off":
        return 0, None
    if mode == "on":
        if max_running is None:
            return (
                None,
                "max_running_requests is unknown for this server, so 'on' has no value: use threshold N",
            )
        return max_running, None
    if mode == "threshold N":
        if n is None:
            return None, "N: enter the largest batch size that still drafts"
        if n < 1:
            return None, "N must be ≥ 1 (0 is 'off')"
        if max_running is not None and n > max_running:
            return None, f"N must be ≤ the server's max_running_requests ({max_running})"
        return int(n), None
    return None, None


def _change_form(url: str, knob: int | None, max_running: int | None, operator: settings.Operator) -> None:
    st.subheader("Change the knob")
    mode = st.radio("Speculation", MODES, horizontal=True, key="ctl_mode")
    n: int | None = None
    if mode == "threshold N":
        n = st.number_input(
            f"N — speculation drafts while running requests ≤ N (1 … {max_running or '?'})",
            min_value=1,
            max_value=max_running,
            value=min(max_running or 32, 32),
            step=1,
            key="ctl_n",
        )
    if mode == "learn":
        _learn(url)
        return
    reason = st.text_input("Reason (required, recorded in the audit trail)", key="ctl_reason")
    if st.button("Review change", type="primary", key="ctl_review"):
        value, error = _target(mode, n, max_running)
        if error:
            st.error(error)
        elif not reason.strip():
            st.error(
                "Reason: required — say why you are changing speculation (it goes into the audit trail)."
            )
        else:
            st.session_state[PENDING_KEY] = {
                "url": url,
                "old": knob,
                "new": value,
                "mode": mode,
                "reason": reason.strip(),
            }
            st.session_state.pop(RESULT_KEY, None)
    pending = st.session_state.get(PENDING_KEY)
    if pending and pending["url"] == url:
        st.warning(
            f"**Confirm:** set `{url}` spec_max_bs **{pending['old']} → {pending['new']}** "
            f"({estimate.knob_label(pending['new'], max_running)}) as **{operator.actor}**. "
            f"Reason: _{pending['reason']}_",
            icon=":material/warning:",
        )
        ok, cancel = st.columns([1, 6])
        if ok.button("Confirm", type="primary", key="ctl_confirm"):
            with st.spinner("Setting and reading back…"):
                result = actions.apply_knob(
                    settings.db_url(), url, int(pending["new"]), pending["reason"], operator
                )
            st.session_state[RESULT_KEY] = dataclasses.asdict(result)
            st.session_state.pop(PENDING_KEY, None)
            st.rerun()
        if cancel.button("Cancel", key="ctl_cancel"):
            st.session_state.pop(PENDING_KEY, None)
            st.rerun()


def _learn(url: str) -> None:
    """learn = the load-aware policy owns the knob. It runs as its own process (`spectower control auto`)
    so it keeps working with no browser open; from here the operator releases a manual pause."""
    st.info(
        "**learn** hands the knob to the load-aware policy. It runs as its own process so it keeps working "
        "when nobody has this page open; start it (once) with:"
    )
    st.code(f"spectower control auto --server {url} --policy learn --db {settings.db_url()}", language="bash")
    operator = settings.operator_credentials(secrets=_secrets()).operator
    states = data.policy_states(common.store())
    row = None if states.empty else states[states["server_url"] == url]
    paused = (
        row is not None
        and not row.empty
        and not pd.isna(row.iloc[0]["paused_until"])
        and (float(row.iloc[0]["paused_until"]) > time.time())
    )
    if not paused:
        st.caption("The policy is not paused: nothing to release.")
        return
    st.warning("A manual set paused the policy on this server. Release it to let the policy act again.")
    reason = st.text_input("Reason (required, recorded in the audit trail)", key="ctl_release_reason")
    if operator is not None and st.button("Release to the policy", type="primary", key="ctl_release"):
        if not reason.strip():
            st.error("Reason: required — say why the policy may act again.")
            return
        try:
            st.success(actions.release_policy(settings.db_url(), url, reason.strip(), operator))
        except ValueError as exc:
            st.error(str(exc))


def _show_result() -> None:
    result = st.session_state.get(RESULT_KEY)
    if not result:
        return
    if result["confirmed"]:
        st.success(
            f"**Confirmed by read-back:** {result['server_url']} now reports spec_max_bs = "
            f"**{result['read_back']}** (was {result['old_max_bs']}). Audit row written.",
            icon=":material/check_circle:",
        )
    else:
        st.error(
            f"**Not confirmed:** requested {result['requested']} on {result['server_url']}; read back "
            f"{result['read_back']}. {result['error'] or ''}",
            icon=":material/error:",
        )
    if result["per_rank"]:
        st.dataframe(pd.DataFrame(result["per_rank"]), width="stretch", hide_index=True)


def _num(v: object) -> str:
    return "—" if v is None or pd.isna(v) else str(int(v))  # type: ignore[call-overload]


def _audit_trail(url: str) -> None:
    st.subheader("Audit trail")
    eng = common.store()
    f1, f2, f3 = st.columns(3)
    scope = f1.selectbox("Server", ["this server", "all servers"], key="audit_scope")
    who = f2.selectbox("Actor", ["everyone", "operators", "policy"], key="audit_actor")
    outcome = f3.selectbox("Outcome", ["all", "confirmed", "not confirmed"], key="audit_outcome")
    prefix = {"everyone": None, "operators": "operator:", "policy": "policy:"}[who]
    events = data.control_events(eng, server_url=url if scope == "this server" else None, actor_prefix=prefix)
    if not events.empty and outcome != "all":
        events = events[events["confirmed"].astype(bool) == (outcome == "confirmed")]
    if events.empty:
        st.caption("No control events match.")
        return
    sets = events[events["action"] == "set"]
    last = (sets if not sets.empty else events).iloc[0]
    st.markdown(
        f"Latest: **{common.clock(last['ts'])}** · `{last['actor']}` · {last['action']} "
        f"on {last['server_url']} · "
        f"{_num(last['old_max_bs'])} → {_num(last['new_max_bs'])} · "
        + ("confirmed" if bool(last["confirmed"]) else f"NOT confirmed ({last['error']})")
        + f" · _{last['reason']}_"
    )
    shown = events.assign(when=[common.clock(t) for t in events["ts"]])[
        ["when", "actor", "server_url", "action", "old_max_bs", "new_max_bs", "confirmed", "reason", "error"]
    ]
    st.dataframe(shown, width="stretch", hide_index=True)
    d1, d2, _ = st.columns([1, 1, 4])

    def csv() -> bytes:
        return events.to_csv(index=False).encode()

    d1.download_button("Export CSV", csv, "spectower-audit.csv", "text/csv", key="audit_csv")

    def jsonl() -> bytes:
        rows = events.astype(object).where(events.notna(), None).to_dict(orient="records")
        return ("\n".join(json.dumps(r, default=str) for r in rows) + "\n").encode()

    d2.download_button("Export JSONL", jsonl, "spectower-audit.jsonl", "application/jsonl", key="audit_jsonl")
