"""Control: the knob per server (off / on / threshold N / learn), reason, confirmation, read-back, audit."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from ...collectors.sglang.exploration import summary as exploration_summary
from ...collectors.sglang.launcher import first_launcher
from ...collectors.sglang.stalls import loop_report
from .. import actions, data, estimate, settings
from . import common

if TYPE_CHECKING:
    from ...control.knob_state import KnobState, Target

# The form's choices: the knob's own modes (control.knob.knob_mode: off / on / threshold), and learn, which
# hands the knob to the policy process instead of setting it.
CHOICES = ("off", "on", "threshold N", "learn")
PENDING_KEY = "ctl_pending"
RESULT_KEY = "ctl_result"
LIVE_TIMEOUT_S = 3.0  # the page reads the server on every render; never hang the page on it
FORM_KEYS = ("ctl_mode", "ctl_n", "ctl_reason", "ctl_hold", "ctl_release_reason", "ctl_freeze_reason")


def _secrets() -> Any:
    try:
        return st.secrets
    except Exception:
        return None


def _user() -> Any:
    try:
        return st.user
    except Exception:  # no auth configured: st.user is still readable, but never fail the page on it
        return None


def _headers() -> Any:
    try:
        return st.context.headers
    except Exception:
        return None


def _live(url: str, operator: settings.Operator | None) -> tuple[KnobState | None, dict[str, Any]]:
    """The server's own account of the knob (value per rank, owner, lock, last writer, policy's last
    decision), read on every render with a short deadline: the state, and the dict the page shows
    (``{"error": ...}`` and no state when it cannot be read)."""
    try:
        state = actions.read_state(url, operator, timeout_s=LIVE_TIMEOUT_S)
    except Exception as exc:  # an unreachable server is shown, not raised
        return None, {"error": str(exc)}
    return state, state.to_dict()


def _yes_no(value: object) -> str:
    return "yes" if bool(value) and not pd.isna(value) else "no"


def _when(ts: object) -> str:
    return common.clock(float(ts)) if isinstance(ts, int | float) else "—"


def _lock_text(live: dict[str, Any]) -> str:
    lock = live.get("lock")
    if not live.get("ownership_supported"):
        return "not reported (the plugin predates server-side locks)"
    if not lock:
        return "none: the policy may act"
    left = live.get("lock_left_s")
    until = "until released" if lock.get("expires_at") is None else f"expires {_when(lock['expires_at'])}"
    more = "" if left is None else f" ({common.span_text(float(left))} left)"
    return f"{lock.get('writer')} lock since {_when(lock.get('since'))}, {until}{more}"


def credentials() -> settings.CredentialStatus:
    """Who may act on this page (and the Fleet page), and why not when nobody may."""
    return settings.operator_credentials(secrets=_secrets(), user=_user(), headers=_headers())


def render() -> None:
    st.title("Control")
    db = common.page_database()
    if db is None:
        return
    creds = credentials()
    operator = creds.operator
    if operator is None:
        st.warning(f"**Read-only.** {creds.why_not}.", icon=":material/lock:")
        if creds.login_needed and st.button("Sign in", key="ctl_login"):
            provider = os.environ.get(settings.ENV_OIDC_PROVIDER)
            st.login(provider) if provider else st.login()
    else:
        st.success(
            f"Acting as **{operator.actor}** ({creds.identity} identity). Every change is confirmed, read "
            "back and audited.",
            icon=":material/verified_user:",
        )
    servers = data.servers(db)
    server = common.server_choice(servers, key="ctl_server")
    url = str(server["url"])
    max_running = None if pd.isna(server.get("max_running_requests")) else int(server["max_running_requests"])
    latest = data.latest_engine(db, int(server["id"]))
    state, live = _live(url, operator)
    if "error" not in live and live.get("max_running_requests"):
        max_running = int(live["max_running_requests"])
    if "error" in live:
        knob = None if latest is None or latest["spec_max_bs"] is None else int(latest["spec_max_bs"])
        title = "Speculation (as last collected: the server cannot be read now)"
        stale = latest is None or common.is_stale(latest["ts"])
    else:
        knob, stale = live.get("spec_max_bs"), False
        title = "Speculation (read back from the server just now)"

    cols = st.columns([2, 1, 1])
    with cols[0]:
        common.big_number(
            title,
            estimate.knob_label(knob, max_running).upper(),
            f"spec_max_bs = {knob} · max_running_requests = {max_running}"
            + (f" · STALE: collected {common.ago(latest['ts'] if latest else None)}" if stale else ""),
            stale=stale,
        )
    with cols[1]:
        owner = live.get("owner") if "error" not in live else None
        st.metric("Owner", owner or "unknown", help="who holds the knob, as the server reports it")
    with cols[2]:
        # short enough for a quarter of a 1280 px page (the long one ended in "from the s…")
        if st.button("Read live value", key="ctl_read", help="read spec_max_bs back from the server now"):
            st.session_state["ctl_live"] = live
        shown = st.session_state.get("ctl_live")
        if shown:
            if "error" in shown:
                st.error(shown["error"])
            else:
                st.metric("Live spec_max_bs", str(shown.get("spec_max_bs")), help=str(shown.get("mode")))
    said = data.policy_said(db, url)
    if "error" in live:
        st.error(f"The server's own state cannot be read: {live['error']}", icon=":material/cloud_off:")
        if said is not None:
            st.markdown(policy_says_text(said))
    else:
        _server_state(live, _lock_holder(db, state), said)

    if operator is not None:
        _change_form(url, knob, max_running, operator, state, live)
        if live.get("lock"):
            _release_form(url, live, operator)
        launcher = first_launcher(r.get("launcher") for r in live.get("ranks") or [])
        if launcher is not None and launcher.frozen == 0:
            _freeze_form(url, operator)
    _show_result()
    _audit_trail(url)


def _lock_holder(db: Any, state: KnobState | None) -> str | None:
    """Who holds a manual lock and since when, from the audit row of the set that took it
    (control.audit.lock_holder); None when no manual lock holds."""
    from ...control.audit import lock_holder

    if state is None or not state.lock or state.lock.get("writer") != "manual":
        return None
    event = lock_holder(db, state)
    if event is None:
        return "unknown: no set of this lock in this database's audit"
    return f"`{event.actor}` since {_when(event.ts)} ({event.reason})"


def _server_state(
    live: dict[str, Any], holder: str | None = None, said: dict[str, Any] | None = None
) -> None:
    """Value per DP rank, owner, lock and expiry, who holds a manual lock, last writer, the policy's last
    decision and what the running policy says now (``said``: its runner's newest line, from the database)."""
    write = live.get("last_write") or {}
    decision = live.get("policy_last") or {}
    lines = [f"**Lock:** {_lock_text(live)}"]
    if holder:
        lines.append(f"**Held by:** {holder}")
    if write:
        change = "release" if write.get("release") else f"{write.get('previous')} → {write.get('value')}"
        lines.append(f"**Last writer:** {write.get('writer')} at {_when(write.get('ts'))} ({change})")
    if decision:
        applied = "applied" if decision.get("applied") else "refused by the server (a lock held)"
        lines.append(
            f"**Policy's last decision:** set {decision.get('value')} at {_when(decision.get('ts'))}, "
            + applied
        )
    else:
        lines.append("**Policy's last decision:** none since the server started")
    if said is not None:
        lines.append(policy_says_text(said))
    st.markdown("  \n".join(lines))
    ranks = [
        {"dp_rank": r.get("dp_rank"), "spec_max_bs": r.get("spec_max_bs"), "owner": r.get("owner"),
         "lock expires": "—" if not r.get("lock") else (
             "until released" if (r.get("lock") or {}).get("expires_at") is None
             else _when((r.get("lock") or {}).get("expires_at")))}
        for r in live.get("ranks") or []
    ]  # fmt: skip
    st.dataframe(pd.DataFrame(ranks), width="stretch", hide_index=True)
    _exploration(live)
    _stalls(live)


def policy_says_text(said: dict[str, Any], now: float | None = None) -> str:
    """One line: what the policy said last and since when; where its runner's last step is older than the
    staleness horizon, that it may not be running."""
    mode, step = said["mode"], said.get("updated_ts")
    if common.is_stale(step, now):
        who = (f"**Policy {mode} said** (its last step {common.ago(step, now)}: is `spectower control auto` "
               "still running?)")  # fmt: skip
    else:
        who = f"**Policy {mode} says** (its last step {common.ago(step, now)})"
    return f"{who}, since {_when(said.get('said_ts'))}: {said['said']}"


def _exploration(live: dict[str, Any]) -> None:
    """Each rank's exploration (collectors/sglang/exploration.py): near capacity its windows cost queued
    requests' first tokens. Nothing for a plugin that does not publish it."""
    for rank in live.get("ranks") or []:
        explored = exploration_summary(rank.get("explore"))
        if explored is not None:
            st.markdown(f"**Exploration, rank {rank.get('dp_rank')}:** {explored}")


STALLS_SHOWN = 5  # the newest stalls the page lists per rank


def _stalls(live: dict[str, Any]) -> None:
    """Each rank's output stalls (plugin 0.4.7, plugin/loop_stalls.py): how often the scheduler's output
    stopped for a quarter second or more, and what took the newest; "why did latency double" often starts
    here. Nothing for a plugin that does not publish them."""
    for rank in live.get("ranks") or []:
        report = loop_report(rank.get("loop"))
        if report is None:
            continue
        st.markdown(f"**Output stalls, rank {rank.get('dp_rank')}:** {report.summary()}")
        if report.recent:
            rows = [{"ended": _when(s.at), "seconds": round(s.seconds, 2), "what took it": s.cause()}
                    for s in reversed(report.recent[-STALLS_SHOWN:])]  # fmt: skip
            st.dataframe(pd.DataFrame(rows), width="stretch", hide_index=True)
    _launcher(live)


def _launcher(live: dict[str, Any]) -> None:
    """SGLang's launcher (plugin 0.4.8): its long collections pause every request's output even when no rank
    stalled; said once (every rank carries the same block), with what stops them where nothing is frozen."""
    report = first_launcher(rank.get("launcher") for rank in live.get("ranks") or [])
    if report is None:
        return
    st.markdown(f"**Launcher:** {report.summary()}")
    if report.advice:
        st.warning(report.advice)


def _freeze_form(url: str, operator: settings.Operator) -> None:
    """Offered while the launcher reports nothing frozen: SGLang's /freeze_gc, read back and audited."""
    st.subheader("Freeze the garbage collectors")
    st.info("SGLang's /freeze_gc moves the objects its launcher and scheduler hold now out of the "
            "collector's scans, so the long full collections that pause every request's output stop. Do it "
            "after some warm-up; SGLang has no endpoint that undoes it.")  # fmt: skip
    reason = st.text_input("Why freeze (required, recorded in the audit trail)", key="ctl_freeze_reason")
    if st.button("Freeze", key="ctl_freeze"):
        if not reason.strip():
            st.error("Reason: required — say why the collectors are frozen.")
            return
        with st.spinner("Freezing and reading back…"):
            result = actions.freeze_gc(settings.db_url(), url, reason.strip(), operator)
        _done(result)


def _target(mode: str, n: int | None, state: KnobState) -> tuple[Target | None, int | None, str | None]:
    """(what to set, the ceiling it resolves to on this server now, None) or (None, None, error naming the
    field), by control.knob's own rule. The preview only: at Confirm control.audit resolves the target once
    against the server as it is then, and that value is set and audited."""
    from ...control.knob_state import KnobError, resolve_target

    target: Target
    if mode == "threshold N":
        if n is None:
            return None, None, "N: enter the largest batch size that still drafts"
        target = int(n)
    elif mode in ("off", "on"):
        target = "off" if mode == "off" else "on"
    else:
        return None, None, None
    try:
        return target, resolve_target(state, target), None
    except KnobError as exc:
        return None, None, str(exc)


def _mode_of(live: dict[str, Any]) -> str:
    return {"off": "off", "on": "on", "threshold": "threshold N"}.get(str(live.get("mode")), "off")


def _change_form(
    url: str,
    knob: int | None,
    max_running: int | None,
    operator: settings.Operator,
    state: KnobState | None,
    live: dict[str, Any],
) -> None:
    st.subheader("Change the knob")
    if state is None:  # the server cannot be read now: preview against its facts as last collected
        from ...collectors.sglang.server_info import ServerInfo
        from ...control.knob_state import KnobState

        state = KnobState(url, ServerInfo(max_running_requests=max_running), bands_allow_zero=None)
    if "ctl_mode" not in st.session_state and "error" not in live:  # the form starts where the server is
        st.session_state["ctl_mode"] = _mode_of(live)
    mode = st.radio("Speculation", CHOICES, horizontal=True, key="ctl_mode")
    n: int | None = None
    if mode == "threshold N":
        fits = isinstance(knob, int) and 1 <= knob <= (max_running or knob)
        start = knob if fits and knob is not None else min(max_running or 32, 32)
        n = st.number_input(
            f"N — speculation drafts while running requests ≤ N (1 … {max_running or '?'})",
            min_value=1,
            max_value=max_running,
            value=start,
            step=1,
            key="ctl_n",
        )
    if mode == "learn":
        _learn(url, live)
        return
    hold = st.text_input(
        "Hold (the manual lock expires after this long, e.g. 30m or 2h; empty = until released)",
        key="ctl_hold",
    )
    reason = st.text_input("Reason (required, recorded in the audit trail)", key="ctl_reason")
    if st.button("Review change", type="primary", key="ctl_review"):
        target, value, error = _target(mode, n, state)
        hold_s, hold_error = hold_seconds(hold)
        if error or hold_error:
            st.error(error or hold_error)
        elif not reason.strip():
            st.error(
                "Reason: required — say why you are changing speculation (it goes into the audit trail)."
            )
        else:
            st.session_state[PENDING_KEY] = {
                "url": url,
                "old": knob,
                "target": target,
                "new": value,
                "mode": mode,
                "reason": reason.strip(),
                "hold_s": hold_s,
                "hold": hold.strip() or "until released",
            }
            st.session_state.pop(RESULT_KEY, None)
    pending = st.session_state.get(PENDING_KEY)
    if pending and pending["url"] == url:
        st.warning(
            f"**Confirm:** set `{url}` spec_max_bs **{pending['old']} → {pending['new']}** "
            f"({estimate.knob_label(pending['new'], max_running)}) as **{operator.actor}**, locked against "
            f"any policy ({pending['hold']}). Reason: _{pending['reason']}_",
            icon=":material/warning:",
        )
        ok, cancel = st.columns([1, 6])
        if ok.button("Confirm", type="primary", key="ctl_confirm"):
            with st.spinner("Setting and reading back…"):
                result = actions.apply_knob(
                    settings.db_url(), url, pending["target"], pending["reason"], operator,
                    hold_s=pending.get("hold_s"),
                )  # fmt: skip
            _done(result)
        if cancel.button("Cancel", key="ctl_cancel"):
            st.session_state.pop(PENDING_KEY, None)
            st.rerun()


def hold_seconds(text: str) -> tuple[float | None, str | None]:
    if not text.strip():
        return None, None
    from ...control.durations import DurationError, parse_duration_within
    from ...plugin.knob_contract import MAX_HOLD_S, MIN_OPERATOR_HOLD_S

    try:  # the range `control set --hold` takes
        return parse_duration_within(text, "Hold", MIN_OPERATOR_HOLD_S, MAX_HOLD_S), None
    except DurationError as exc:
        return None, str(exc)


def _done(result: actions.ActionResult) -> None:
    """Keep the outcome, let the form start again from the server's new state, and re-render at once."""
    st.session_state[RESULT_KEY] = dataclasses.asdict(result)
    st.session_state.pop(PENDING_KEY, None)
    st.session_state.pop("ctl_live", None)
    for key in FORM_KEYS:
        st.session_state.pop(key, None)
    st.rerun()


def _release_form(url: str, live: dict[str, Any], operator: settings.Operator) -> None:
    """Offered whenever a lock holds (a manual set's, or a sweep's that outlived its sweep)."""
    st.subheader("Release the lock")
    st.info(f"The server reports a lock: {_lock_text(live)}. Releasing lets the policy act again.")
    reason = st.text_input("Reason (required, recorded in the audit trail)", key="ctl_release_reason")
    if st.button("Release", type="primary", key="ctl_release"):
        if not reason.strip():
            st.error("Reason: required — say why the policy may act again.")
            return
        with st.spinner("Releasing and reading back…"):
            result = actions.release_lock(settings.db_url(), url, reason.strip(), operator)
        _done(result)


def policy_command(url: str, db_url: str, key_file: str | None) -> str:
    """The command that starts the learn policy, runnable exactly as printed."""
    prefix = f"SPECTOWER_ADMIN_KEY_FILE={shlex.quote(key_file)} " if key_file else ""
    return (
        f"{prefix}spectower control auto --server {shlex.quote(url)} --policy learn "
        f"--db {shlex.quote(db_url)}"
    )


def _learn(url: str, live: dict[str, Any]) -> None:
    """learn = the load-aware policy owns the knob. It runs as its own process (`spectower control auto`)
    so it keeps working with no browser open; it acts whenever no lock holds on the server."""
    st.info(
        "**learn** hands the knob to the load-aware policy. It runs as its own process so it keeps working "
        "when nobody has this page open; start it (once) with:"
    )
    key_file = os.environ.get(settings.ENV_ADMIN_KEY_FILE)
    st.code(policy_command(url, settings.db_url(), key_file), language="bash", wrap_lines=True)
    if not key_file:
        st.caption(
            f"Set {settings.ENV_ADMIN_KEY_FILE} to the file holding the server's admin key first (spectower "
            "never takes a key on the command line)."
        )
    if not live.get("lock"):
        st.caption("No lock holds on the server: the policy (if one runs) is free to act.")


def _show_result() -> None:
    result = st.session_state.get(RESULT_KEY)
    if not result:
        return
    if result["confirmed"] and result.get("action") == "freeze-gc":
        st.success(
            f"**Frozen, confirmed by read-back:** every process of {result['server_url']} reports frozen "
            "objects; the knob is unchanged. Audit row written.",
            icon=":material/check_circle:",
        )
    elif result["confirmed"] and result.get("action") == "release":
        st.success(
            f"**Released, confirmed by read-back:** {result['server_url']} now reports owner "
            f"**{result.get('owner')}** and spec_max_bs = **{result['read_back']}**. Audit row written.",
            icon=":material/check_circle:",
        )
    elif result["confirmed"]:
        st.success(
            f"**Confirmed by read-back:** {result['server_url']} now reports spec_max_bs = "
            f"**{result['read_back']}** (was {result['old_max_bs']}), owner **{result.get('owner')}**. "
            "Audit row written.",
            icon=":material/check_circle:",
        )
    else:
        st.error(
            f"**Not confirmed ({result.get('outcome', 'unknown')}):** {result.get('action', 'set')} "
            f"{'' if result['requested'] is None else result['requested']} on {result['server_url']}; read "
            f"back {result['read_back']}. {result['error'] or ''}",
            icon=":material/error:",
        )
    if result["per_rank"]:
        st.dataframe(pd.DataFrame(result["per_rank"]), width="stretch", hide_index=True)


def _num(v: object) -> str:
    return "—" if v is None or pd.isna(v) else str(int(v))  # type: ignore[call-overload]


def _audit_trail(url: str) -> None:
    from ...control import audit

    st.subheader("Audit trail")
    db = common.store()
    f1, f2, f3 = st.columns(3)
    scope = f1.selectbox("Server", ["this server", "all servers"], key="audit_scope")
    who = f2.selectbox("Actor", ["everyone", "operators", "policy"], key="audit_actor")
    outcome = f3.selectbox("Outcome", ["all", "confirmed", "not confirmed"], key="audit_outcome")
    prefix = {"everyone": None, "operators": "operator:", "policy": "policy:"}[who]
    events = data.control_events(db, server_url=url if scope == "this server" else None, actor_prefix=prefix)
    if not events.empty and outcome != "all":
        events = events[events["confirmed"].astype(bool) == (outcome == "confirmed")]
    if not events.empty:  # a confirmed row has no error (control.audit.remarks: rows before schema v4)
        columns = zip(events["confirmed"], events["error"], events["note"], strict=True)
        said = [audit.remarks(bool(c), common.text_or(e, "") or None, common.text_or(n, "") or None)
                for c, e, n in columns]  # fmt: skip
        events = events.assign(error=[e for e, _ in said], note=[n for _, n in said])
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
    shown = events.assign(
        when=[common.clock(t) for t in events["ts"]], confirmed=[_yes_no(v) for v in events["confirmed"]]
    )[["when", "actor", "server_url", "action", "old_max_bs", "new_max_bs", "confirmed", "reason", "error",
       "note"]]  # fmt: skip
    st.dataframe(shown, width="stretch", hide_index=True)
    d1, d2, _ = st.columns([1, 1, 4])

    def csv() -> bytes:
        return events.to_csv(index=False).encode()

    d1.download_button("Export CSV", csv, "spectower-audit.csv", "text/csv", key="audit_csv")

    def jsonl() -> bytes:
        rows = events.astype(object).where(events.notna(), None).to_dict(orient="records")
        return ("\n".join(json.dumps(r, default=str) for r in rows) + "\n").encode()

    d2.download_button("Export JSONL", jsonl, "spectower-audit.jsonl", "application/jsonl", key="audit_jsonl")
