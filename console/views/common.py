"""What every page shares: the database, the time range, staleness, the "nothing collected yet" notice,
the page's link (server and time range in the URL), and charts that download as CSV."""

from __future__ import annotations

import functools
import gc
import html
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ParamSpec

import pandas as pd
import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from ...storage import Database, DatabaseURLError
from ...storage.dialect import error_line
from .. import data, settings
from ..time_text import ago

P = ParamSpec("P")

TIME_RANGE_KEY = "time_range"
END_KEY = "time_end"
# The URL of every page carries what it shows, so an operator can paste it into an incident channel:
# ?server=<url>&range=1h[&end=2026-11-30T14:15:00Z] (end pins the window; without it the page is live).
SERVER_PARAM = "server"
RANGE_PARAM = "range"
END_PARAM = "end"
_END_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

# Streamlit truncates st.metric labels and values with an ellipsis; an operator must read them whole.
# Labels wrap between words (never inside one), values never wrap and are sized to fit their column;
# the browser test measures every metric's text against its container at 1280 and 1920 px.
PAGE_CSS = """
<style>
[data-testid="stMetricLabel"] .stMarkdownEllipsis, [data-testid="stMetricLabel"] p {
  white-space: normal !important; overflow: visible !important; text-overflow: clip !important;
  word-break: normal !important; overflow-wrap: normal !important; hyphens: none !important;
}
[data-testid="stMetricValue"] { font-size: clamp(1.25rem, 1.75vw, 2.1rem) !important; }
[data-testid="stMetricValue"] .stMarkdownEllipsis, [data-testid="stMetricValue"] p {
  overflow: visible !important; text-overflow: clip !important; white-space: nowrap !important;
}
.spectower-big { container-type: inline-size; width: 100%; }
.spectower-big-value { white-space: nowrap; font-weight: 700; line-height: 1.1; }
</style>
"""


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Database:
    store = data.open_store(url)
    if store is None:
        raise LookupError(url)
    return store


@functools.cache
def freeze_startup_heap() -> None:
    """Once per console process, its libraries imported: every object alive now (modules, classes,
    Streamlit's server) moved out of the garbage collector's scans (``gc.freeze``). A refresh allocates
    tens of thousands of containers (frames, figure dicts, counter intervals): enough for a full
    collection on most Speculation refreshes, and a full collection walks every object of the process
    (~190,000 here), 100 ms of that page's refresh on a busy 2-core host; 10 ms once these are frozen."""
    from .. import charts  # noqa: F401  (plotly: the charts' library, loaded before the freeze)

    gc.collect()  # garbage left now would be frozen for good
    gc.freeze()


def database() -> Database | None:
    """The storage Database for this console (one per process), or None while the file does not exist."""
    try:
        return _store(settings.db_url())
    except LookupError:  # not cached: the page shows what to start, and the next rerun looks again
        return None
    except DatabaseURLError as exc:  # a file there that is not spectower's: said once, nothing drawn
        st.error(str(exc), icon=":material/database:")
        st.stop()


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
    db = database()
    if db is None:
        raise LookupError(f"no spectower database at {settings.db_url()}")
    return db


ROUTED_KEY = "_spectower_routed"


def mark_routed() -> None:
    """app.py ran in this session (st.navigation owns the pages): see ``route``."""
    st.session_state[ROUTED_KEY] = True


def shows_database_errors(draw: Callable[P, None]) -> Callable[P, None]:
    """``draw`` with a database error shown as one line where it would have drawn (a locked, corrupt or
    unreachable database is the operator's to know; a traceback is not how to say it). No rows is no
    error: the pages say "no data" for an empty frame themselves."""

    @functools.wraps(draw)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            draw(*args, **kwargs)
        except SQLAlchemyError as exc:
            st.error(
                f"Database error reading `{settings.db_url()}`: {error_line(exc)}", icon=":material/database:"
            )

    return guarded


def route() -> None:
    """Called first by every page script. Streamlit runs a ``pages/`` folder's script on its own (its old
    multipage mode) when the very first session of a console process opens a page's URL directly, before
    any run of app.py has called st.navigation: no sidebar, no time range, the link's parameters ignored.
    Such a run switches Streamlit to st.navigation (what that call would do) and reruns through app.py."""
    if st.session_state.get(ROUTED_KEY):
        return
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False
    st.rerun()


def page_style() -> None:
    """The console's CSS (once per run, from app.py; style-only HTML takes no room on the page)."""
    st.html(PAGE_CSS)


def range_slug(label: str) -> str:
    """A time range as the URL spells it: ``15 min`` -> ``15m``, ``1 h`` -> ``1h``, ``7 d`` -> ``7d``."""
    return label.replace(" ", "").replace("min", "m")


RANGE_SLUGS = {range_slug(label): label for label in settings.TIME_RANGES_S}


def parse_end(text: str | None) -> float | None:
    """The URL's ``end`` (``2026-11-30T14:15:00Z`` or epoch seconds), None when absent or unreadable."""
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.strptime(text, _END_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def end_text(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime(_END_FORMAT)


def time_range_selector() -> None:
    """The sidebar's time range (shared by every page through session state, mirrored in the URL)."""
    options = list(settings.TIME_RANGES_S)
    if TIME_RANGE_KEY not in st.session_state:  # a new session: the link it was opened with wins
        wanted = RANGE_SLUGS.get(str(st.query_params.get(RANGE_PARAM, "")), settings.DEFAULT_TIME_RANGE)
        st.session_state[TIME_RANGE_KEY] = wanted
        st.session_state[END_KEY] = parse_end(st.query_params.get(END_PARAM))
    st.sidebar.selectbox("Time range", options, key=TIME_RANGE_KEY)
    st.query_params[RANGE_PARAM] = range_slug(st.session_state[TIME_RANGE_KEY])
    end = st.session_state.get(END_KEY)
    if end is None:
        st.query_params.pop(END_PARAM, None)
        if st.sidebar.button("Pin this range for a link", key="pin_end", icon=":material/push_pin:"):
            st.session_state[END_KEY] = time.time()
            st.rerun()
    else:
        st.query_params[END_PARAM] = end_text(end)
        st.sidebar.caption(f"Pinned: the window ends {clock(end)} (not live).")
        if st.sidebar.button("Back to live", key="unpin_end", icon=":material/play_arrow:"):
            st.session_state[END_KEY] = None
            st.rerun()
    st.sidebar.caption("The address bar is this view's link (server and time range).")


def window(now: float | None = None) -> Window:
    label = st.session_state.get(TIME_RANGE_KEY, settings.DEFAULT_TIME_RANGE)
    span = settings.TIME_RANGES_S.get(label, settings.TIME_RANGES_S[settings.DEFAULT_TIME_RANGE])
    pinned = st.session_state.get(END_KEY)
    t1 = float(pinned) if pinned is not None else (time.time() if now is None else now)
    return Window(t1 - span, t1, label)


def is_pinned() -> bool:
    return st.session_state.get(END_KEY) is not None


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


def no_data_notice(db: Database | None, what: str = "engine samples") -> bool:
    """Say exactly what to start when storage is empty; True when there is nothing to draw."""
    url = settings.db_url()
    if db is None:
        st.warning(f"No spectower database at `{url}` yet.", icon=":material/database:")
    elif data.servers(db).empty:
        st.warning(f"No SGLang server has been collected into `{url}` yet.", icon=":material/database:")
    else:
        return False
    st.markdown(f"Start the collector against your server(s) to fill it ({what} appear here within seconds):")
    st.code(settings.collect_hint(url), language="bash", wrap_lines=True)
    st.caption("Add one `--server` per SGLang server; `--gpu` is optional (nvml on this host, or dcgm=URL).")
    return True


def page_database(what: str = "engine samples", *, needs_server: bool = True) -> Database | None:
    """The database a page draws from, or None once the page has said what to start (``no_data_notice``:
    the page then draws nothing more). ``needs_server``: the page has nothing to show until an SGLang
    server is collected (Overview, Speculation, Control); the GPUs and Benchmarks pages have (a GPU-only
    collector, imported runs) and need only the database, each with a notice of its own when it is empty."""
    db = database()
    if (db is None or needs_server) and no_data_notice(db, what):
        return None
    return db


def text_or(value: object, default: str) -> str:
    """A text column's value, or ``default`` when it is NULL (None or NaN after pandas)."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or value == "":
        return default
    return str(value)


def rounded(value: Any, digits: int = 0) -> float | None:
    """A table cell's number, rounded as its source's precision allows (DCGM reports power to 4 decimals,
    NVML to the milliwatt), or None where it is missing (None or NaN after pandas)."""
    return None if value is None or pd.isna(value) else round(float(value), digits)


def fmt(value: float | None, digits: int = 1, unit: str = "") -> str:
    if value is None or pd.isna(value):
        return "—"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


BIG_MAX_REM = 3.4
_BIG_EM_PER_CHAR = 0.68  # a bold capital is about this wide; the value shrinks so it fits on one line


def big_number(label: str, value: str, caption: str = "", stale: bool = False) -> None:
    """The one number an operator reads first, much bigger than st.metric, on one line: its size follows
    the column's width (container query units), so ``THRESHOLD 13`` never wraps or breaks mid-word."""
    color = "#9e9e9e" if stale else "inherit"
    strike = "text-decoration: line-through;" if stale else ""
    fit = 100.0 / (_BIG_EM_PER_CHAR * max(4, len(value)))
    st.markdown(
        f"<div class='spectower-big' data-testid='spectowerBigNumber'>"
        f"<div style='font-size:0.95rem;opacity:0.8'>{html.escape(label)}</div>"
        f"<div class='spectower-big-value' style='font-size:min({BIG_MAX_REM}rem, {fit:.2f}cqi);"
        f"color:{color};{strike}'>{html.escape(value)}</div>"
        f"<div style='font-size:0.9rem;opacity:0.8'>{html.escape(caption)}</div></div>",
        unsafe_allow_html=True,
    )


def server_choice(servers: pd.DataFrame, key: str) -> pd.Series:
    """One server: a selectbox when there are several; the choice is the URL's ``server``."""
    urls = list(servers["url"])
    if len(urls) == 1:
        st.caption(f"Server: `{urls[0]}`")
        st.query_params[SERVER_PARAM] = urls[0]
        return servers.iloc[0]
    if key not in st.session_state and st.query_params.get(SERVER_PARAM) in urls:
        st.session_state[key] = st.query_params[SERVER_PARAM]
    url = st.selectbox("Server", urls, key=key)
    st.query_params[SERVER_PARAM] = url
    return servers[servers["url"] == url].iloc[0]


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """A chart's data as CSV: epoch ``ts`` columns get a readable UTC time beside them."""
    out = frame.copy()
    if "ts" in out and "time_utc" not in out:
        out.insert(0, "time_utc", pd.to_datetime(out["ts"], unit="s", utc=True).dt.strftime(_END_FORMAT))
    return out.to_csv(index=False).encode("utf-8")


def csv_button(frame: pd.DataFrame | Callable[[], pd.DataFrame], key: str, name: str) -> None:
    """Download a chart's data as CSV; built only when clicked, never on a live refresh."""

    def build() -> bytes:
        return csv_bytes(frame() if callable(frame) else frame)

    st.download_button(
        "CSV", build, f"spectower-{name}.csv", "text/csv", key=f"{key}_csv", on_click="ignore",
        type="tertiary", icon=":material/download:", help="Download this chart's data as CSV",
    )  # fmt: skip


def chart(
    fig: Any, frame: pd.DataFrame | Callable[[], pd.DataFrame], key: str, name: str | None = None
) -> None:
    """A plotly chart with its data downloadable as CSV."""
    st.plotly_chart(fig, width="stretch", key=key, config={"displaylogo": False})
    csv_button(frame, key, name or key)
