"""AppTest over every console page, on a real SQLite file filled through storage."""

from __future__ import annotations

import gc
import json
import re
import time
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from spectower.console import charts, data
from spectower.console.views import common, speculation
from spectower.storage import open_database
from spectower.storage.models import ControlEvent, EngineSample
from sqlalchemy import text
from sqlmodel import select
from streamlit.testing.v1 import AppTest

from benchmarks import synthetic

APP = str(Path(__file__).resolve().parents[1] / "console" / "app.py")
PAGES = ("overview", "speculation", "gpus", "control", "benchmarks", "fleet")
PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"
TIMEOUT = 120  # a loaded 2-core machine renders slowly; assertions are on content, not speed


def _url(path: Path) -> str:
    return f"sqlite:///{path}"


@pytest.fixture(autouse=True)
def _no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SPECTOWER_ADMIN_KEY", "SPECTOWER_ADMIN_KEY_FILE", "SPECTOWER_OPERATOR"):
        monkeypatch.delenv(var, raising=False)


def _fill(
    path: Path,
    *,
    servers: int = 1,
    gpus: int = 2,
    bench: bool = True,
    age_s: float = 0.0,
    span_s: float = 1800.0,
) -> None:
    now = time.time() - age_s
    with open_database(_url(path)) as db:
        synthetic.fill(db, t0=now - span_s, t1=now, servers=servers, gpus=gpus, step_s=2.0, knob_period_s=300)
        if bench:
            synthetic.add_bench_run(db, PROFILE, now - 86400, "cuda12", scale_on=0.8)
            synthetic.add_bench_run(db, PROFILE, now - 3600, "cuda13")
        synthetic.add_policy_events(db, "http://10.0.0.1:30000", now - 1800, now, 300, 64)


def _app(path: Path, monkeypatch: pytest.MonkeyPatch, page: str | None = None) -> AppTest:
    monkeypatch.setenv("SPECTOWER_DB", _url(path))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    if page is not None and page != "overview":
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [m.value for m in at.caption] + [m.value for m in at.info]
    parts += [m.value for m in at.warning] + [m.value for m in at.error] + [m.value for m in at.success]
    parts += [c.value for c in at.code] + [t.value for t in at.title] + [s.value for s in at.subheader]
    return "\n".join(str(p) for p in parts)


def _charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_with_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    at = _app(db, monkeypatch, page)
    assert "STALE" not in _text(at)
    if page in ("overview", "speculation", "gpus", "benchmarks"):
        assert _charts(at) >= 1


def test_the_startup_heap_is_frozen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The console freezes what is alive once its libraries are loaded (common.freeze_startup_heap): a full
    collection then walks a refresh's objects, not every module's (100 ms of a Speculation refresh)."""
    db = tmp_path / "s.db"
    _fill(db, gpus=1, bench=False, span_s=600)
    _app(db, monkeypatch)
    assert gc.get_freeze_count() > 10_000


def test_every_chart_is_the_figure_plotly_would_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """plain_figure.PlainFigure hands Streamlit its plain dicts: on every page and range, what Streamlit gets
    equals go.Figure(..., _validate=False).to_dict() of the same dicts (the figure the page built before)."""
    checked: list[str] = []
    plain_to_dict = charts.PlainFigure.to_dict

    def compared(fig: charts.PlainFigure) -> dict[str, Any]:
        built = fig.__dict__.get("_plain")
        got = plain_to_dict(fig)
        if built is not None:
            want = go.Figure(built, _validate=False).to_dict()
            assert got == want
            assert json.loads(pio.to_json(got, validate=False)) == json.loads(
                pio.to_json(want, validate=False)
            )
            checked.append(str(got["layout"].get("title", {}).get("text")))
        return got

    monkeypatch.setattr(charts.PlainFigure, "to_dict", compared)
    db = tmp_path / "s.db"
    _fill(db, gpus=2)
    at = _app(db, monkeypatch)
    for rng in ("1 h", "24 h"):
        at.session_state["time_range"] = rng
        for page in PAGES:
            at.switch_page(f"pages/{page}.py")
            at.run()
            assert not at.exception, [e.value for e in at.exception]
    assert len(checked) >= 2 * 8 and {"Throughput", "Speedup from speculation vs load"} <= set(checked), (
        checked
    )


def test_overview_shows_the_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    at = _app(db, monkeypatch)
    labels = {m.label: m.value for m in at.metric}
    for label in (
        "Running requests",
        "Queued requests",
        "Input tok/s",
        "Accept length",
        "Accept rate",
        "Draft steps",
        "KV cache used",
    ):
        assert label in labels and labels[label] not in ("—", "no data"), (label, labels)
    text = _text(at)
    assert "Output tok/s" in text and "http://10.0.0.1:30000" in text and "SPECULATION" not in text
    assert _charts(at) == 4 + 1  # the server's throughput, requests/knob, TTFT and ITL, then the GPU grid
    assert at.sidebar.selectbox[0].label == "Time range"
    at.radio(key="ov_gpu_metric").set_value("Temperature").run()
    assert not at.exception and _charts(at) >= 1


@pytest.mark.parametrize("page", PAGES)
def test_no_database_says_what_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    at = _app(tmp_path / "missing.db", monkeypatch, page)
    assert not (tmp_path / "missing.db").exists()  # looking does not create an empty database
    text = _text(at)
    if page == "benchmarks":
        assert "spectower collect" in text or "No benchmark runs" in text
    else:
        assert "spectower collect" in text
    assert _charts(at) == 0


@pytest.mark.parametrize("page", PAGES)
def test_empty_database_says_what_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    db = tmp_path / "empty.db"
    open_database(_url(db)).close()
    at = _app(db, monkeypatch, page)
    text = _text(at)
    assert "spectower collect" in text or "No benchmark runs" in text or "No GPU source" in text
    assert _charts(at) == 0


@pytest.mark.parametrize("page", PAGES)
def test_a_gpu_only_database_draws_the_pages_that_need_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str
) -> None:
    # common.page_database: Overview, Speculation, Control and Fleet need a collected server; GPUs and
    # Benchmarks draw from the database alone (a collector run with --gpu and no --server)
    db = tmp_path / "gpus.db"
    now = time.time()
    with open_database(_url(db)) as store:
        synthetic.fill(store, t0=now - 600, t1=now, servers=0, gpus=2, step_s=5.0)
    at = _app(db, monkeypatch, page)
    says_no_server = "No SGLang server has been collected" in _text(at)
    assert says_no_server == (page in ("overview", "speculation", "control", "fleet")), _text(at)
    if page == "gpus":
        assert _charts(at) >= 1


def test_many_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db, servers=3)
    at = _app(db, monkeypatch)
    text = _text(at)
    for i in (1, 2, 3):
        assert f"http://10.0.0.{i}:30000" in text
    assert sum(m.label == "Running requests" for m in at.metric) == 3
    at.switch_page("pages/speculation.py")
    at.run()
    assert not at.exception
    box = at.selectbox(key="spec_server")
    assert len(box.options) == 3
    box.select("http://10.0.0.3:30000").run()
    assert not at.exception
    assert "Speedup now" in _text(at)
    at.switch_page("pages/control.py")
    at.run()
    assert len(at.selectbox(key="ctl_server").options) == 3


def test_no_gpu_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db, gpus=0)
    at = _app(db, monkeypatch)
    assert "No GPU source" in _text(at)
    assert _charts(at) == 4  # the server's four charts are there, no GPU grids
    at.switch_page("pages/gpus.py")
    at.run()
    assert not at.exception
    assert "No GPU source" in _text(at) and "--gpu" in _text(at)


def test_stale_data_is_marked_and_not_drawn_as_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    _fill(db, age_s=1200)  # the collector stopped 20 minutes ago
    at = _app(db, monkeypatch)
    text = _text(at)
    assert "STALE" in text
    labels = {m.label: m.value for m in at.metric}
    assert labels["Running requests"] == "—" and labels["Accept length"] == "—"
    at.switch_page("pages/gpus.py")
    at.run()
    assert "STALE" in _text(at)
    at.switch_page("pages/speculation.py")
    at.run()
    assert "STALE" in _text(at)


def test_time_range_bounds_every_series(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    at = _app(db, monkeypatch)
    at.sidebar.selectbox[0].select("15 min").run()
    assert not at.exception
    assert "range 15 min" in _text(at)


def test_speculation_page_live_estimate_and_crossovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    # just under the page's default hour, so the page's window and the one below hold the same counters
    _fill(db, span_s=3500)
    at = _app(db, monkeypatch, "speculation")
    labels = {m.label: m.value for m in at.metric}
    # the profile's curves cross between 8 and 16; the engine's counters under the alternating knob find it
    assert 8 <= float(labels["Crossover (benchmark)"]) <= 24, labels
    live = labels["Crossover (live)"]  # the value alone; its interval in the caption under it
    assert re.fullmatch(r"~[\d.]+", live), labels
    assert 6 <= float(live[1:]) <= 30, labels
    text = _text(at)
    assert "95 %" in text and "decode counters" in text
    # the verdict at today's load: "is" where its interval lies on one side of break-even, "may be" where it
    # holds 1.0, "is" where no interval is known there (which one depends on where the synthetic load sits
    # when the page reads it)
    verdict = re.search(r"speculation (is|may be) (?:paying off|costing throughput)[^(]*\(([^)]*)\)", text)
    assert verdict is not None, text
    verb, source = verdict.group(1), verdict.group(2)
    interval = re.fullmatch(r"live estimate, 95 % ([\d.]+)-([\d.]+)", source)
    holds_one = interval is not None and float(interval.group(1)) <= 1.0 <= float(interval.group(2))
    assert verb == ("may be" if holds_one else "is"), verdict.group(0)
    assert _charts(at) == 4  # speedup, accept length, accept rate, policy timeline
    # the same estimate the console's one function computes (every page reads it from there)
    with open_database(_url(db)) as store:
        win = time.time()
        est = data.live_speedup(store, 1, win - 3600, win).estimate
    assert est.label.startswith(f"{live} (") and f"95 % interval {est.label.split('(')[1][:-1]}" in text
    fig = at.get("plotly_chart")[0].proto.spec
    assert "95% interval: live" in fig and "engine counters" in fig
    # the synthetic knob sits at 0 every other 5 minutes: the accept charts leave those stretches blank
    # (the gauge's 1.00 and 0 there measure nothing) and say why, where they drew acceptance collapsing
    accept = next(f for f in _figures(at) if f["layout"]["title"]["text"] == "Accept length")
    drawn = next(t for t in accept["data"] if t.get("name") == "accept length")["y"]
    values = [y for y in drawn if y is not None]
    # only a bucket across a flip of the knob holds both (about one in 30 at this page's bucket width)
    assert None in drawn and sum(y < 1.2 for y in values) <= 0.1 * len(values), drawn
    assert "Gaps: nothing drafted" in text


def test_speculation_page_says_who_set_the_knob_and_the_crossover_its_policy_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """learn sat at 4 where the live crossover read about 20 (the demo, 2026-12-07): the Knob metric now says
    who set it and the crossover that decision read, and its help says why the two differ."""
    db = tmp_path / "s.db"
    _fill(db, span_s=1800)
    _newest_sample(db, spec_max_bs=4)
    reason = "move the ceiling 16 -> 4: crossover ~5.3 (1.6-8.8), speedup per bin 1: 1.05x; kept extend 7 %"
    with open_database(_url(db)) as store, store.session() as s:
        s.add(ControlEvent(ts=time.time(), actor="policy:learn", server_url="http://10.0.0.1:30000",
                           action="set", old_max_bs=16, new_max_bs=4, reason=reason,
                           confirmed=True))  # fmt: skip
    at = _app(db, monkeypatch, "speculation")
    assert {m.label: m.value for m in at.metric}["Knob"] == "threshold 4"
    caption = r"set by policy:learn \d+ s ago; its crossover ~5\.3 \(1\.6-8\.8\)"
    assert re.search(caption, _text(at)), _text(at)
    knob = next(m for m in at.metric if m.label == "Knob")
    assert "counts what each choice served" in knob.help


def test_speculation_page_says_when_a_server_publishes_no_counters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    with open_database(_url(db)) as store, store.engine.begin() as conn:
        conn.execute(text("DELETE FROM engine_counter_sample"))  # an older plugin: samples, no counters
    at = _app(db, monkeypatch, "speculation")
    assert {m.label: m.value for m in at.metric}["Crossover (live)"] == "—"
    assert speculation.NO_COUNTERS in _text(at)
    assert _charts(at) == 4  # the benchmark curves are still drawn


def test_benchmarks_compare_and_export(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    at = _app(db, monkeypatch, "benchmarks")
    assert _charts(at) == 3  # one run: throughput, speedup, latency
    at.radio(key="bench_section").set_value("Compare two runs").run()
    text = _text(at)
    assert "Stack difference" in text
    assert len(at.dataframe) == 1  # the stack difference (params differ between the two runs)
    assert any(m.label.startswith("Crossover B") for m in at.metric)
    at.radio(key="bench_section").set_value("Export / import").run()
    at.radio(key="exp_fmt").set_value("JSONL").run()
    assert not at.exception
    assert at.get("download_button")


def test_control_read_only_without_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    at = _app(db, monkeypatch, "control")
    assert any("Read-only" in w.value and "SPECTOWER_ADMIN_KEY" in w.value for w in at.warning)
    assert not [b for b in at.button if b.key in ("ctl_review", "ctl_confirm")]
    assert len(at.radio) == 0
    assert "Audit trail" in _text(at)
    assert len(at.dataframe) >= 1  # the policy's events are listed


def test_control_credentials_from_streamlit_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    key = tmp_path / "admin.key"
    key.write_text("s3cret\n")
    monkeypatch.setenv("SPECTOWER_DB", _url(db))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.secrets["spectower"] = {"admin_key_file": str(key), "operator": "dana"}
    at.run()
    at.switch_page("pages/control.py")
    at.run()
    assert not at.exception
    assert any("operator:dana" in s.value for s in at.success)
    assert "s3cret" not in _text(at)


def test_control_refuses_missing_reason_and_bad_n(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    monkeypatch.setenv("SPECTOWER_ADMIN_KEY", "k")
    monkeypatch.setenv("SPECTOWER_OPERATOR", "erin")
    at = _app(db, monkeypatch, "control")
    at.radio(key="ctl_mode").set_value("off").run()
    at.button(key="ctl_review").click().run()
    assert any("Reason" in e.value for e in at.error)
    assert not [b for b in at.button if b.key == "ctl_confirm"]
    # N is bounded by the server's max_running_requests (64 in the profile)
    at.radio(key="ctl_mode").set_value("threshold N").run()
    assert at.number_input(key="ctl_n").max == 64
    at.text_input(key="ctl_reason").input("incident 42").run()
    at.button(key="ctl_review").click().run()
    assert [b for b in at.button if b.key == "ctl_confirm"]
    assert any("Confirm" in w.value and "incident 42" in w.value for w in at.warning)
    at.button(key="ctl_cancel").click().run()
    assert not [b for b in at.button if b.key == "ctl_confirm"]
    with open_database(_url(db)) as store, store.session() as s:
        operator_rows = s.exec(select(ControlEvent).where(ControlEvent.actor.startswith("operator:"))).all()
    assert operator_rows == []  # a cancelled change writes nothing and touches no server


# ------------------------------------------------ issue #18: the console as operators expect it


def _newest_sample(path: Path, **values: float) -> None:
    """One engine sample newer than the synthetic history, copying its newest row but for ``values``."""
    with open_database(_url(path)) as db, db.session() as s:
        row = s.exec(select(EngineSample).order_by(EngineSample.ts.desc())).first()  # type: ignore[attr-defined]
        assert row is not None
        fields = {k: v for k, v in row.model_dump().items() if k != "id"}
        fields.update(ts=time.time() + 1, **values)
        s.add(EngineSample(**fields))


def _figures(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def _trace_names(fig: dict[str, Any]) -> set[str]:
    return {str(t.get("name")) for t in fig.get("data", []) if t.get("name")}


def test_overview_charts_throughput_requests_and_knob_with_units(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    _fill(db, span_s=5400)  # older than the page's hour
    at = _app(db, monkeypatch)
    figs = _figures(at)
    throughput = next(f for f in figs if f["layout"]["title"]["text"].startswith("Throughput"))
    assert {"output", "input (prefill)"} <= _trace_names(throughput)
    assert throughput["layout"]["yaxis"]["title"]["text"] == "tok/s"
    knob = next(f for f in figs if f["layout"]["title"]["text"].startswith("Requests and the knob"))
    assert {"running", "queued", "knob (spec_max_bs)", "knob set by"} <= _trace_names(knob)
    assert knob["layout"]["yaxis"]["title"]["text"] == "requests"
    setters = next(t for t in knob["data"] if t.get("name") == "knob set by")
    assert all(text.startswith("policy:learn:") for text in setters["text"])  # who set it, on every marker
    # latency over the range, in ms, where the page had only "Latency now" (the 3 a.m. question: when did
    # it double?); the synthetic TTFT p99 is 0.8 s + 10 ms a request, its ITL p99 30 ms + 0.5 ms a request
    for title, low, high in (("TTFT", 800, 1500), ("ITL", 30, 70)):
        fig = next(f for f in figs if f["layout"]["title"]["text"] == title)
        assert fig["layout"]["yaxis"]["title"]["text"] == "ms" and {"p50", "p99"} <= _trace_names(fig)
        p50, p99 = ([y for y in next(t for t in fig["data"] if t.get("name") == q)["y"] if y is not None]
                    for q in ("p50", "p99"))  # fmt: skip
        assert p99 and low <= min(p99) and max(p99) <= high, (title, p99[:5])
        assert sum(p50) < sum(p99)
    # a server older than the range: every x axis spans the range (1 h by default), not just where data is
    # (a younger one's starts where its data does: test_console_charts)
    t0, t1 = (pd.Timestamp(x).timestamp() for x in throughput["layout"]["xaxis"]["range"])
    assert t1 - t0 == pytest.approx(3600, abs=2)


def test_overview_marks_the_servers_pauses_on_its_throughput(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored pauses of the window (console/pause_marks.py): a marker each at its end, its length on the
    right axis, saying which process paused and why; one shorter than MIN_MARKED_S is not marked."""
    db = tmp_path / "s.db"
    _fill(db)
    now = time.time()
    with open_database(_url(db)) as store:
        sid = store.server_id("http://10.0.0.1:30000")
        store.insert_many("server_pause", [
            {"server_id": sid, "ts": now - 600, "seconds": 0.37, "kind": "gc", "process": "launcher",
             "detail": "gen 2"},
            {"server_id": sid, "ts": now - 300, "seconds": 1.2, "kind": "stall", "process": "rank 0",
             "detail": "waiting for a batch's result 1.10 s (EXTEND, 5 requests)"},
            {"server_id": sid, "ts": now - 200, "seconds": 0.02, "kind": "gc", "process": "rank 0",
             "detail": None},
        ])  # fmt: skip
    at = _app(db, monkeypatch)
    throughput = next(f for f in _figures(at) if f["layout"]["title"]["text"].startswith("Throughput"))
    (marks,) = [t for t in throughput["data"] if t.get("name") == "server pauses"]
    assert marks["text"] == ["launcher gc 0.37 s (gen 2)",
                             "rank 0 stall 1.20 s: waiting for a batch's result 1.10 s (EXTEND, 5 requests)"]
    assert marks["yaxis"] == "y2" and marks["y"] == [0.37, 1.2]
    assert throughput["layout"]["yaxis2"]["title"]["text"] == "pause (s)"
    assert {"output", "input (prefill)"} <= _trace_names(throughput)


def test_overview_says_why_a_number_does_not_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    _newest_sample(db, spec_max_bs=8, num_running_reqs=30, spec_num_steps=0, spec_accept_rate=0.0,
                   token_usage=0.0031, prefill_tok_s=None)  # fmt: skip
    at = _app(db, monkeypatch)
    labels = {m.label: m.value for m in at.metric}
    assert labels["Accept rate"] == "gated" and labels["Accept length"] == "gated"
    assert "Speculation is gated: 30 running requests > knob 8" in _text(at)
    assert labels["Input tok/s"] == "no data"
    assert labels["KV cache used"] == "0.31 %"  # a small share still reads, not 0.00
    _newest_sample(db, spec_max_bs=64, num_running_reqs=10, spec_num_steps=3, spec_accept_rate=0.5)
    at = _app(db, monkeypatch)
    labels = {m.label: m.value for m in at.metric}
    assert labels["Accept rate"] == "0.50" and "gated" not in _text(at)


@pytest.mark.parametrize("page", ["overview", "speculation", "gpus", "benchmarks"])
def test_every_chart_downloads_as_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    at = _app(db, monkeypatch, page)
    csv = [b for b in at.get("download_button") if str(b.proto.id).endswith("_csv") or "CSV" in b.proto.label]
    assert _charts(at) >= 1 and len(csv) == _charts(at), (len(csv), _charts(at))


def test_csv_has_readable_times() -> None:
    frame = pd.DataFrame({"ts": [0.0, 60.0], "output_tok_s": [1.0, 2.0]})
    text = common.csv_bytes(frame).decode()
    assert text.splitlines()[0] == "time_utc,ts,output_tok_s"
    assert "1970-01-01T00:01:00Z" in text


def test_the_url_carries_server_and_time_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db, servers=3)
    monkeypatch.setenv("SPECTOWER_DB", _url(db))
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"range": "6h", "server": "http://10.0.0.2:30000"})
    at.run()
    assert at.sidebar.selectbox[0].value == "6 h"
    # (AppTest runs a page script on its own after the first run: no sidebar, the session's range holds)
    at.switch_page("pages/speculation.py")
    at.run()
    assert not at.exception
    assert at.selectbox(key="spec_server").value == "http://10.0.0.2:30000"
    assert "Live estimate over the last 6 h" in _text(at)
    assert at.query_params["server"] in ("http://10.0.0.2:30000", ["http://10.0.0.2:30000"])
    # a pasted link opens a new session: the page it names, its range and server
    fresh = AppTest.from_file(APP, default_timeout=TIMEOUT)
    fresh.query_params.update({"range": "15m", "server": "http://10.0.0.3:30000"})
    fresh.run()
    assert fresh.sidebar.selectbox[0].value == "15 min"
    assert fresh.selectbox(key="ov_server").value == "http://10.0.0.3:30000"
    assert sum(m.label == "Running requests" for m in fresh.metric) == 1  # only that server
    assert fresh.query_params["range"] in ("15m", ["15m"])


def test_a_pinned_end_is_a_fixed_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    monkeypatch.setenv("SPECTOWER_DB", _url(db))
    end = time.time() - 900
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"range": "15m", "end": common.end_text(end)})
    at.run()
    assert not at.exception
    assert "pinned" in _text(at) and common.clock(end)[:16] in _text(at)
    fig = _figures(at)[0]
    t1 = pd.Timestamp(fig["layout"]["xaxis"]["range"][1]).timestamp()
    assert t1 == pytest.approx(int(end), abs=1)
    assert [b.key for b in at.sidebar.button] == ["unpin_end"]  # "Back to live"


def test_parse_end_and_range_slugs() -> None:
    assert common.parse_end("1970-01-01T00:01:00Z") == 60.0
    assert common.parse_end("120") == 120.0
    assert common.parse_end("yesterday") is None and common.parse_end(None) is None
    assert common.RANGE_SLUGS == {"15m": "15 min", "1h": "1 h", "6h": "6 h", "24h": "24 h", "7d": "7 d"}


def test_gpus_compact_picker_processes_and_axes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db, gpus=8)
    at = _app(db, monkeypatch, "gpus")
    picker = at.get("button_group")
    assert picker, "the GPU picker is a row of short chips"
    assert "8 GPUs on gpu-host-1" in _text(at)
    procs = at.dataframe[-1].value
    assert list(procs.columns) == ["GPU", "PID", "process", "GPU memory", "share of GPU"]
    assert procs.iloc[0]["PID"] == 4100 and procs.iloc[0]["share of GPU"] > 80  # biggest first, per GPU
    for fig in _figures(at):
        axes = [v for k, v in fig["layout"].items() if k.startswith("xaxis")]
        assert axes and all(
            a["tickformatstops"] and a["ticklabeloverflow"] == "hide past domain" for a in axes
        )
        ranges = {tuple(a["range"]) for a in axes}
        assert len(ranges) == 1  # every panel over the same window


def test_benchmark_charts_have_units_and_intervals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    _fill(db)
    at = _app(db, monkeypatch, "benchmarks")
    for fig in _figures(at):
        assert "(" in fig["layout"]["yaxis"]["title"]["text"] or fig["layout"]["yaxis"]["title"]["text"] in (
            "spec on / spec off",
        )
        assert fig["layout"]["xaxis"]["title"]["text"] == "concurrency (concurrent requests)"
    speed = next(f for f in _figures(at) if "Speedup" in f["layout"]["title"]["text"])
    assert any(str(t.get("name", "")).startswith("95% interval") for t in speed["data"])
    tok = next(f for f in _figures(at) if "throughput" in f["layout"]["title"]["text"].lower())
    assert tok["layout"]["yaxis"]["title"]["text"] == "output throughput (tok/s)"


def test_benchmarks_empty_state_suggests_a_saved_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    _fill(db, bench=False)
    at = _app(db, monkeypatch, "benchmarks")
    code = [c.value for c in at.code]
    assert any("bench sweep" in c and "--save" in c and _url(db) in c for c in code), code


def test_a_database_error_reaches_the_page_as_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table the page reads is gone (a damaged or foreign database): the page says so in one line
    instead of a traceback, and instead of drawing "no GPUs" as the old reads did."""
    db = tmp_path / "s.db"
    _fill(db, bench=False)
    with open_database(_url(db)) as store, store.engine.begin() as conn:
        conn.execute(text("DROP TABLE gpu_process_sample"))
        conn.execute(text("DROP TABLE gpu_sample"))
    at = _app(db, monkeypatch, "gpus")
    errors = [e.value for e in at.error]
    assert any(e.startswith("Database error reading") and "gpu_sample" in e for e in errors), errors
    assert all("\n" not in e for e in errors)


def test_no_benchmark_runs_points_at_sections_the_page_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The empty Runs section names where to start a sweep and where to import, each a section the page's
    picker offers: it said "Start a sweep (next tab)", where the next section is "Compare two runs"."""
    import re

    db = tmp_path / "empty.db"
    open_database(_url(db)).close()
    at = _app(db, monkeypatch, "benchmarks")
    hint = next(info.value for info in at.info if "No benchmark runs" in info.value)
    named = re.findall(r"\*\*(.+?)\*\*", hint)
    assert named and set(named) <= set(at.radio(key="bench_section").options), (named, hint)
