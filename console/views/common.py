"""What every page shares: the engine, the time range, staleness, the "nothing collected yet" notice."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
import streamlit as st
from spectower.console import data, settings
from spectower.storage import Database

TIME_RANGE_KEY = "time_range"


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Database:
    store = data.open_store(url)
    if store is None:
        raise LookupError(url)
    return store


def engine() -> Database | None:
    """The storage Database for this console (one per process), or None while the file does not exist."""
    try:
        return _store(settings.db_url())
    except LookupError:  # not cached: the page shows what to start, and the next rerun looks again
        return None


@dataclass(frozen=True)
class Window:
    t0: float
    t1: float
    label: str

    @property
    def span_s(self) -> float:
        return self.t1 - self.t0


def store() -> Database:
    """The Database, where a page has already checked that it exists."""
    db = engine()
    if db is None:
        raise LookupError(f"no spectower database at {settings.db_url()}")
    return db


def time_range_selector() -> None:
    """The sidebar's time range (shared by every page through session state)."""
    options = list(settings.TIME_RANGES_S)
    if TIME_RANGE_KEY not in st.session_state:
        st.session_state[TIME_RANGE_KEY] = settings.DEFAULT_TIME_RANGE
    st.sidebar.selectbox("Time range", options, key=TIME_RANGE_KEY)


def window(now: float | None = None) -> Window:
    label = st.session_state.get(TIME_RANGE_KEY, settings.DEFAULT_TIME_RANGE)
    span = settings.TIME_RANGES_S.get(label, settings.TIME_RANGES_S[settings.DEFAULT_TIME_RANGE])
    t1 = time.time() if now is None else now
    return Window(t1 - span, t1, label)


def ago(ts: float | None, now: float | None = None) -> str:
    if ts is None or pd.isna(ts):
        return "never"
    s = max(0.0, (time.time() if now is None else now) - float(ts))
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.1f} days ago"


def span_text(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:g} h"


def clock(ts: float | None) -> str:
    if ts is None or pd.isna(ts):
        return "—"
    return datetime.fromtimestamp(float(ts), tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def is_stale(ts: float | None, now: float | None = None) -> bool:
    if ts is None or pd.isna(ts):
        return True
    return (time.time() if now is None else now) - float(ts) > settings.DEFAULT_STALE_AFTER_S


def stale_banner(what: str, ts: float | None) -> None:
    st.error(
        f"**STALE — {what}**: newest sample {ago(ts)} ({clock(ts)}). Values below are the last known, "
        "not current. Is `spectower collect` running?",
        icon=":material/schedule:",
    )


def no_data_notice(eng: Database | None, what: str = "engine samples") -> bool:
    """Say exactly what to start when storage is empty; True when there is nothing to draw."""
    url = settings.db_url()
    if eng is None or not data.has_schema(eng):
        st.warning(f"No spectower database at `{url}` yet.", icon=":material/database:")
    elif data.servers(eng).empty:
        st.warning(f"No SGLang server has been collected into `{url}` yet.", icon=":material/database:")
    else:
        return False
    st.markdown(f"Start the collector against your server(s) to fill it ({what} appear here within seconds):")
    st.code(settings.collect_hint(url), language="bash")
    st.caption("Add one `--server` per SGLang server; `--gpu` is optional (nvml on this host, or dcgm=URL).")
    return True


def text_or(value: object, default: str) -> str:
    """A text column's value, or ``default`` when it is NULL (None or NaN after pandas)."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or value == "":
        return default
    return str(value)


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None or pd.isna(value):
        return "—"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def big_number(label: str, value: str, caption: str = "", stale: bool = False) -> None:
    """The one number an operator reads first, much bigger than st.metric."""
    color = "#9e9e9e" if stale else "inherit"
    strike = "text-decoration: line-through;" if stale else ""
    st.markdown(
        f"<div style='font-size:0.95rem;opacity:0.8'>{label}</div>"
        f"<div style='font-size:3.4rem;font-weight:700;line-height:1.05;color:{color};{strike}'>{value}</div>"
        f"<div style='font-size:0.9rem;opacity:0.8'>{caption}</div>",
        unsafe_allow_html=True,
    )


def server_choice(servers: pd.DataFrame, key: str) -> pd.Series:
    """One server: a selectbox when there are several."""
    urls = list(servers["url"])
    if len(urls) == 1:
        st.caption(f"Server: `{urls[0]}`")
        return servers.iloc[0]
    url = st.selectbox("Server", urls, key=key)
    return servers[servers["url"] == url].iloc[0]
