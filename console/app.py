"""The Streamlit entrypoint (`spectower console` runs `streamlit run` on this file).

A router: the sidebar (database, time range) is shared; each page lives in console/pages/ and draws
through console/views/<page>.py.
"""

from __future__ import annotations

import streamlit as st
from spectower.console import settings
from spectower.console.views import common

st.set_page_config(page_title="spectower", page_icon=":material/speed:", layout="wide")
common.freeze_startup_heap()

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon=":material/monitoring:", default=True),
    st.Page("pages/speculation.py", title="Speculation", icon=":material/bolt:"),
    st.Page("pages/gpus.py", title="GPUs", icon=":material/memory:"),
    st.Page("pages/control.py", title="Control", icon=":material/tune:"),
    st.Page("pages/fleet.py", title="Fleet", icon=":material/dns:"),
    st.Page("pages/benchmarks.py", title="Benchmarks", icon=":material/bar_chart:"),
]

page = st.navigation(PAGES)
common.page_style()
with st.sidebar:
    st.markdown("### spectower")
    st.caption(f"Database: `{settings.db_url()}`")
common.time_range_selector()
common.mark_routed()
page.run()
