"""Export: bench_serving JSONL round trip, CSV neutralising, Parquet, sample ranges, atomic output."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from spectower.collectors.bench.persist import to_models
from spectower.collectors.bench.sweep import PointResult, SweepConfig, SweepResult
from spectower.storage import Database, open_database, queries
from spectower.storage.bench_serving import import_file
from spectower.storage.export import export_bench, export_samples, neutralise_cell
from spectower.storage.files import finite_or_null
from spectower.storage.models import BenchPoint, BenchRun, ControlEvent, EngineSample, GpuSample

FILES = (
    "Scicom-AI-Enterprise-Organization__llm-benchmaq__H200_tp8_dp1_in1024_out128_p100_c100_38769a.jsonl",
    "TonyLi15__sglang-benchmark__agg_n100_in512_out128_c8.jsonl",
    "datacrunch-research__h200-benchmarks__llama_3_3_70b_online_output.jsonl",
)


@pytest.fixture
def db(db_url: str) -> Database:
    # every test here runs on SQLite and on PostgreSQL (tests/conftest.py: db_url)
    d = open_database(db_url)
    yield d  # type: ignore[misc]
    d.close()


def point_facts(db: Database, run_id: int, skip: tuple[str, ...] = ()) -> list[dict[str, object]]:
    drop = ("id", "run_id", *skip)
    return [
        {k: v for k, v in p.model_dump().items() if k not in drop} for p in queries.bench_points(db, run_id)
    ]


def test_import_export_import_is_lossless(db: Database, real_data: Path, tmp_path: Path) -> None:
    first = [import_file(db, real_data / "bench_serving" / f).run_id or 0 for f in FILES]
    out = tmp_path / "all.jsonl"
    assert export_bench(db, first, "jsonl", out) == 9
    again = import_file(db, out)
    assert again.points == 9 and again.line_errors == [] and again.warnings == []
    # three runs in one file come back as three runs, each point column by column (the client's
    # request_rate Infinity, "no rate limit", goes out as null in strict JSON and comes back empty)
    assert len(again.run_ids) == 3
    for old_id, new_id in zip(first, again.run_ids, strict=True):
        old_points = finite_or_null(point_facts(db, old_id, skip=("extra_json",)))
        assert point_facts(db, new_id, skip=("extra_json",)) == old_points
        old_run, new_run = queries.bench_run(db, old_id), queries.bench_run(db, new_id)
        skip = {"id", "source_sha256"}
        assert {k: v for k, v in new_run.model_dump().items() if k not in skip} == {
            k: v for k, v in old_run.model_dump().items() if k not in skip
        }
    # one run out and back in: identical down to extra_json
    single = tmp_path / "one.jsonl"
    export_bench(db, [first[0]], "jsonl", single)
    assert point_facts(db, import_file(db, single).run_id or 0) == finite_or_null(point_facts(db, first[0]))
    # and a second export of the re-imported runs is byte-identical to the first
    out2 = tmp_path / "again.jsonl"
    export_bench(db, again.run_ids, "jsonl", out2)
    lines2 = [json.loads(x) for x in out2.read_text().splitlines()]
    lines1 = [json.loads(x) for x in out.read_text().splitlines()]
    for a, b in zip(lines1, lines2, strict=True):  # only the run ids differ
        a["spectower_run"].pop("id"), b["spectower_run"].pop("id")
    assert lines1 == lines2


def test_sweep_run_exports_bench_serving_keys(db: Database, tmp_path: Path) -> None:
    info = {"version": "0.5.23", "speculative_algorithm": "EAGLE3", "cuda_graph_max_bs": 48}
    rid = db.save_bench_run(
        BenchRun(
            created_at=1.0,
            source="sweep",
            backend="sglang",
            server_info_json=json.dumps(info),
            params_json=json.dumps({"random_input_len": 1024, "random_output_len": 256}),
        ),
        [
            BenchPoint(concurrency=1, spec_on=True, output_throughput=96.1, mean_ttft_ms=50.0, completed=32),
            BenchPoint(
                concurrency=1, spec_on=False, output_throughput=89.5, ratio_ci_lo=1.02, ratio_ci_hi=1.12
            ),
        ],
    )
    out = tmp_path / "sweep.jsonl"
    export_bench(db, [rid], "jsonl", out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["max_concurrency"] == 1 and lines[0]["output_throughput"] == 96.1
    assert lines[0]["mean_ttft_ms"] == 50.0 and lines[0]["completed"] == 32
    assert lines[0]["server_info"] == info  # nested, as the client writes it
    assert lines[0]["random_input_len"] == 1024 and lines[0]["backend"] == "sglang"
    assert lines[0]["spectower_spec_on"] is True and lines[1]["spectower_ratio_ci_lo"] == 1.02
    # re-imported, the sweep keeps its spectower-only facts
    back = import_file(db, out)
    pts = queries.bench_points(db, back.run_id or 0)
    assert [(p.spec_on, p.output_throughput, p.ratio_ci_hi) for p in pts] == [
        (True, 96.1, None),
        (False, 89.5, 1.12),
    ]


def test_a_sweeps_lengths_survive_export_and_import(db: Database, tmp_path: Path) -> None:
    """A sweep stores --input-len/--output-len as input_len/output_len; its exported lines said
    random_input_len/random_output_len null. Saved as `bench sweep` saves it (persist.to_models)."""
    config = SweepConfig(server="http://127.0.0.1:1", concurrency=(4,), input_len=700, output_len=90)
    result = SweepResult(config=config, server_info={"version": "0.5.23"}, max_running_requests=48,
                         started_at=1.0e9, knob_before=[48], knob_restored=True)  # fmt: skip
    for mode, tok_s, knob in (("on", 120.0, 48), ("off", 100.0, 0)):
        windows = [tok_s * 0.99, tok_s * 1.01]
        figures = {"steady_output_throughput": tok_s, "steady_windows": windows, "completed": 8}
        point = PointResult(concurrency=4, mode=mode, knob_value=knob, figures=figures, accept_length=None,
                            accept_length_source="none", started_at=1.0e9)  # fmt: skip
        result.points.append(point)
    rid = db.save_bench_run(*to_models(result))
    out = tmp_path / "sweep.jsonl"
    export_bench(db, [rid], "jsonl", out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(x["random_input_len"], x["random_output_len"]) for x in lines] == [(700, 90), (700, 90)]
    back = import_file(db, out)
    again = tmp_path / "again.jsonl"
    export_bench(db, [back.run_id or 0], "jsonl", again)
    assert [
        (x["random_input_len"], x["random_output_len"])
        for x in map(json.loads, again.read_text().splitlines())
    ] == [(700, 90)] * 2


@pytest.mark.parametrize(
    ("cell", "safe"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("-3.5", "-3.5"),
        ("-1e-3", "-1e-3"),
        ("plain", "plain"),
        (-3.5, -3.5),
        (7, 7),
    ],
)
def test_neutralise_cell(cell: object, safe: object) -> None:
    assert neutralise_cell(cell) == safe


def test_csv_export_neutralises_but_keeps_numbers(db: Database, tmp_path: Path) -> None:
    rid = db.save_bench_run(
        BenchRun(created_at=1.0, source="import:x", tag="=cmd|' /C calc'!A0"),
        [BenchPoint(concurrency=4, output_throughput=-12.5, extra_json='{"note": "@evil"}')],
    )
    out = tmp_path / "run.csv"
    export_bench(db, [rid], "csv", out)
    (row,) = list(csv.DictReader(out.open(newline="")))
    assert row["run_tag"] == "'=cmd|' /C calc'!A0"
    assert row["output_throughput"] == "-12.5"  # a number stays a number
    assert row["concurrency"] == "4.0"
    assert row["extra_json"] == '{"note": "@evil"}'  # starts with "{": left as is


def test_parquet_export(db: Database, real_data: Path, tmp_path: Path) -> None:
    rid = import_file(db, real_data / "bench_serving" / FILES[2]).run_id or 0
    out = tmp_path / "run.parquet"
    assert export_bench(db, [rid], "parquet", out) == 7
    table = pq.read_table(out)
    assert table.column("request_rate").to_pylist() == [1.0, 2.0, 4.0, 8.0, 16.0, 4.0, 8.0]
    assert table.column("completed").type == "int64"


def test_export_samples_by_kind_server_and_time(db: Database, tmp_path: Path) -> None:
    a, b = db.server_id("http://a"), db.server_id("http://b")
    g = db.gpu_id("host1", 3, "GPU-x")
    w = db.writer(maintenance=None)
    w.put(
        *[
            EngineSample(server_id=s, ts=100.0 + i, num_running_reqs=float(i))
            for s in (a, b)
            for i in range(10)
        ]
    )
    w.put(*[GpuSample(gpu_id=g, ts=100.0 + i, power_w=-1.0 if i == 0 else 300.0) for i in range(5)])
    w.put(ControlEvent(ts=105.0, actor="operator:=x", server_url="http://a", action="set", reason="-rm"))
    assert w.flush(30)
    out = tmp_path / "e.jsonl"
    assert export_samples(db, "engine", "jsonl", out, server="http://a", start=103.0, end=106.0) == 4
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["ts"] for r in rows] == [103.0, 104.0, 105.0, 106.0]
    assert {r["server_url"] for r in rows} == {"http://a"}
    out = tmp_path / "g.csv"
    assert export_samples(db, "gpu", "csv", out, host="host1") == 5
    rows2 = list(csv.DictReader(out.open(newline="")))
    assert (rows2[0]["gpu_index"], rows2[0]["uuid"], rows2[0]["power_w"]) == ("3", "GPU-x", "-1.0")
    out = tmp_path / "c.csv"
    assert export_samples(db, "control", "csv", out) == 1
    (ev,) = list(csv.DictReader(out.open(newline="")))
    assert (ev["actor"], ev["reason"]) == ("operator:=x", "'-rm")
    out = tmp_path / "e.parquet"
    assert export_samples(db, "engine", "parquet", out) == 20
    assert pq.read_table(out).num_rows == 20


def _refuse(token: str) -> None:
    raise AssertionError(f"bare {token} in an exported line")


def test_jsonl_export_is_strict_json(db: Database, tmp_path: Path) -> None:
    # a point imported before NaN / infinite figures were refused: NaN and -Infinity kept in extra_json,
    # the client's request_rate Infinity in its column
    keys = ["max_concurrency", "request_rate", "completed", "mean_ttft_ms", "std_itl_ms"]
    extra = {"spectower_source_keys": keys, "mean_ttft_ms": math.nan, "std_itl_ms": -math.inf}
    point = BenchPoint(concurrency=4, request_rate=math.inf, completed=10, extra_json=json.dumps(extra))
    old = db.save_bench_run(BenchRun(created_at=1.0, source="import:old.jsonl"), [point])
    sweep = db.save_bench_run(
        BenchRun(created_at=2.0, source="sweep", params_json=json.dumps({"warmup_s": math.inf})),
        [BenchPoint(concurrency=8, spec_on=True, output_throughput=50.0, extra_json='{"ratio": NaN}')],
    )
    out = tmp_path / "runs.jsonl"
    assert export_bench(db, [old, sweep], "jsonl", out) == 2
    first, second = (json.loads(x, parse_constant=_refuse) for x in out.read_text().splitlines())
    assert {k: first[k] for k in keys} == {
        "max_concurrency": 4, "request_rate": None, "completed": 10, "mean_ttft_ms": None, "std_itl_ms": None
    }  # fmt: skip
    assert second["ratio"] is None and second["spectower_run"]["params"] == {"warmup_s": None}
    assert second["output_throughput"] == 50.0
    # samples too: a non-finite gauge is null
    server = db.server_id("http://a")
    w = db.writer(maintenance=None)
    w.put(EngineSample(server_id=server, ts=100.0, gen_throughput=math.inf, num_running_reqs=2.0))
    assert w.flush(30)
    out = tmp_path / "engine.jsonl"
    assert export_samples(db, "engine", "jsonl", out) == 1
    (row,) = (json.loads(x, parse_constant=_refuse) for x in out.read_text().splitlines())
    assert (row["gen_throughput"], row["num_running_reqs"]) == (None, 2.0)


def test_errors_name_the_field_and_leave_no_file(db: Database, tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    with pytest.raises(LookupError, match="run id: no benchmark run 42"):
        export_bench(db, [42], "csv", out)
    with pytest.raises(ValueError, match="--format"):
        export_bench(db, [1], "xlsx", out)
    with pytest.raises(ValueError, match="--kind"):
        export_samples(db, "cpu", "csv", out)
    with pytest.raises(LookupError, match="server"):
        export_samples(db, "engine", "csv", out, server="http://nope")
    with pytest.raises(ValueError, match="--end"):
        export_samples(db, "gpu", "csv", out, start=10.0, end=5.0)
    assert (
        list(tmp_path.iterdir())
        == [tmp_path / "db.sqlite", tmp_path / "db.sqlite-wal", tmp_path / "db.sqlite-shm"]
        or not out.exists()
    )
    assert not out.exists()
    assert not list(tmp_path.glob("*.part"))
