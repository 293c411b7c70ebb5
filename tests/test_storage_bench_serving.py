"""Importing SGLang bench_serving result files: the three real versions, non-strict JSON, bad lines."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from spectower.storage import Database, open_database, queries
from spectower.storage.bench_serving import BenchImportError, export_lines, import_file, import_files

SCICOM = "Scicom-AI-Enterprise-Organization__llm-benchmaq__H200_tp8_dp1_in1024_out128_p100_c100_38769a.jsonl"
TONYLI = "TonyLi15__sglang-benchmark__agg_n100_in512_out128_c8.jsonl"
DATACRUNCH = "datacrunch-research__h200-benchmarks__llama_3_3_70b_online_output.jsonl"


@pytest.fixture
def db(tmp_path: Path) -> Database:
    d = open_database(tmp_path / "db.sqlite")
    yield d  # type: ignore[misc]
    d.close()


def test_scicom_0_5_8_with_output_details(db: Database, real_data: Path) -> None:
    r = import_file(db, real_data / "bench_serving" / SCICOM)
    assert (r.points, r.line_errors) == (1, [])
    run = queries.bench_run(db, r.run_id or 0)
    assert run.sglang_version == "0.5.8.post1"
    assert run.served_model_name == "/workspace/gpt-oss-120b"
    assert (run.backend, run.dataset_name, run.tag) == ("sglang", "random", None)
    assert run.source == f"import:{SCICOM}"
    info = json.loads(run.server_info_json or "{}")
    assert (info["tp_size"], info["cuda_graph_max_bs"]) == (8, 512)
    (p,) = queries.bench_points(db, run.id or 0)
    assert p.concurrency == 100
    assert p.request_rate == math.inf  # written as the non-strict token Infinity
    assert p.completed == 100
    assert p.output_throughput == 810.4119401364685
    assert p.mean_ttft_ms == 3863.401167932898
    assert p.p99_itl_ms == 3094.0290897339582
    assert p.p90_ttft_ms is None  # that version wrote no p90 for TTFT
    assert p.accept_length is None
    assert p.spec_on is False  # server_info.speculative_algorithm is null
    extra = json.loads(p.extra_json or "{}")
    assert extra["p95_itl_ms"] == 11.064785346388815
    assert extra["max_output_tokens_per_s"] == 3972.0
    assert len(extra["itls"]) == 100 and extra["itls"][0][0] == 3.555943926796317  # --output-details
    assert len(extra["generated_texts"]) == 100


def test_tonyli_0_5_5_with_tag(db: Database, real_data: Path) -> None:
    r = import_file(db, real_data / "bench_serving" / TONYLI)
    run = queries.bench_run(db, r.run_id or 0)
    assert (run.tag, run.sglang_version, run.served_model_name) == (
        "agg_n100_in512_out128_c8",
        "0.5.5.post3",
        "Qwen/Qwen2.5-3B-Instruct",
    )
    (p,) = queries.bench_points(db, run.id or 0)
    assert (p.concurrency, p.completed, p.total_input_tokens, p.total_output_tokens) == (8, 100, 26497, 6180)
    assert p.output_throughput == 1418.5390725642164
    assert p.median_tpot_ms == 5.100693528197314
    assert json.loads(p.extra_json or "{}")["concurrency"] == 7.762507194459916  # measured, not the limit


def test_datacrunch_2024_schema_request_rate_sweep(db: Database, real_data: Path) -> None:
    r = import_file(db, real_data / "bench_serving" / DATACRUNCH)
    assert r.points == 7
    run = queries.bench_run(db, r.run_id or 0)
    assert (run.server_info_json, run.sglang_version, run.tag) == (None, None, None)
    pts = queries.bench_points(db, run.id or 0)
    assert [p.request_rate for p in pts] == [1.0, 2.0, 4.0, 8.0, 16.0, 4.0, 8.0]
    assert [p.completed for p in pts] == [300, 600, 1200, 2400, 3200, 1200, 2400]
    assert all(p.concurrency is None and p.spec_on is None for p in pts)  # open loop, unknown server
    assert pts[0].output_throughput == 537.4142851849319
    assert pts[4].median_ttft_ms == 614.2499720444903
    assert pts[0].mean_ttft_ms is None  # the 2024 client wrote only medians for TTFT
    assert pts[0].median_e2e_latency_ms == 7819.046192569658


def test_export_reproduces_every_real_line_exactly(db: Database, real_data: Path) -> None:
    for name in (SCICOM, TONYLI, DATACRUNCH):
        path = real_data / "bench_serving" / name
        r = import_file(db, path)
        original = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        exported = export_lines(db, r.run_id or 0)
        assert [json.dumps(x) for x in exported] == [json.dumps(x) for x in original], name


def test_unlimited_request_rate_and_bad_lines(db: Database, tmp_path: Path) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_text(
        '{"backend": "sglang", "max_concurrency": 4, "completed": 10, "mean_ttft_ms": 12.5, '
        '"request_rate": Infinity, "std_itl_ms": 0.5, "output_throughput": 100.5}\n'
        '{"backend": "sglang", "completed": 12, "output_th\n'  # cut off mid-line
        "\n"
        "[1, 2, 3]\n"
        '{"hello": "world"}\n'
        '{"backend": "sglang", "max_concurrency": 8, "completed": 20, "output_throughput": -1.5}\n'
    )
    r = import_file(db, f)
    assert r.points == 2
    assert [n for n, _ in r.line_errors] == [2, 4, 5]
    assert "not JSON" in r.line_errors[0][1]
    pts = queries.bench_points(db, r.run_id or 0)
    assert pts[0].request_rate == math.inf  # the client's "no arrival-rate limit"
    assert json.loads(pts[0].extra_json or "")["std_itl_ms"] == 0.5
    # a negative throughput is no measurement: column empty, the value kept, the line named
    assert (pts[1].concurrency, pts[1].output_throughput) == (8, None)
    assert json.loads(pts[1].extra_json or "")["output_throughput"] == -1.5
    assert r.warnings and r.warnings[0][0] == 6 and "output_throughput: -1.5 is negative" in r.warnings[0][1]
    lines = export_lines(db, r.run_id or 0)
    assert lines[0]["mean_ttft_ms"] == 12.5 and lines[0]["request_rate"] == math.inf


GOOD_LINE = '{"backend": "sglang", "max_concurrency": 4, "completed": 10, "output_throughput": 100.5}\n'


@pytest.mark.parametrize(
    ("figure", "named"),
    [
        ('"output_throughput": NaN', "output_throughput: NaN"),
        ('"output_throughput": Infinity', "output_throughput: Infinity"),
        ('"mean_ttft_ms": -Infinity', "mean_ttft_ms: -Infinity"),
        ('"std_itl_ms": NaN', "std_itl_ms: NaN"),  # a figure without a column of its own
        ('"itls": [[1.5], [2.0, NaN]]', "itls[1][1]: NaN"),  # --output-details
        ('"request_rate": NaN', "request_rate: NaN"),  # only +Infinity means "no rate limit"
        ('"request_rate": -Infinity', "request_rate: -Infinity"),
    ],
)
def test_a_nan_or_infinite_figure_refuses_the_file(
    db: Database, tmp_path: Path, figure: str, named: str
) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(GOOD_LINE + '{"max_concurrency": 8, "completed": 20, ' + figure + "}\n")
    with pytest.raises(BenchImportError) as caught:
        import_file(db, f)
    assert str(caught.value) == f"{f}: line 2: {named} is not a finite number"
    assert queries.bench_runs(db) == []  # the good first line is not written either


def test_files_of_one_import_are_all_or_nothing(db: Database, tmp_path: Path, real_data: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(GOOD_LINE.replace("100.5", "NaN"))
    with pytest.raises(BenchImportError, match=r"bad\.jsonl: line 1: output_throughput: NaN"):
        import_files(db, [real_data / "bench_serving" / TONYLI, bad])
    assert queries.bench_runs(db) == []  # the good file before it is not written either
    with pytest.raises(BenchImportError, match=r"missing\.jsonl: cannot read"):
        import_files(db, [real_data / "bench_serving" / TONYLI, tmp_path / "missing.jsonl"])
    assert queries.bench_runs(db) == []


def test_a_file_given_twice_in_one_import_is_one_run(db: Database, real_data: Path) -> None:
    path = real_data / "bench_serving" / TONYLI
    first, again = import_files(db, [path, path])
    assert first.run_id is not None and again.duplicate_of == first.run_id and again.run_id is None
    assert len(queries.bench_runs(db)) == 1
    both = import_files(db, [path, path], allow_duplicate=True)
    assert len({r.run_id for r in both}) == 2 and len(queries.bench_runs(db)) == 3


def test_json_python_cannot_read_is_a_skipped_line(db: Database, tmp_path: Path) -> None:
    # nested past the recursion limit (RecursionError) and an integer of 5000 digits (ValueError) were
    # tracebacks, not line errors
    f = tmp_path / "odd.jsonl"
    f.write_text("[" * 100_000 + "\n" + '{"completed": ' + "1" * 5000 + "}\n" + GOOD_LINE)
    r = import_file(db, f)
    assert r.points == 1
    assert r.line_errors == [
        (1, "not usable JSON (nested too deeply)"),
        (2, "not usable JSON (an integer of over 4300 digits)"),
    ]


def test_unusable_file_writes_nothing(db: Database, tmp_path: Path) -> None:
    f = tmp_path / "junk.jsonl"
    f.write_text("not json\n{]\n")
    with pytest.raises(BenchImportError, match="line 1"):
        import_file(db, f)
    with pytest.raises(BenchImportError, match="cannot read"):
        import_file(db, tmp_path / "missing.jsonl")
    assert queries.bench_runs(db) == []


def test_same_file_twice_is_noticed(db: Database, real_data: Path) -> None:
    path = real_data / "bench_serving" / TONYLI
    first = import_file(db, path)
    again = import_file(db, path)
    assert again.duplicate_of == first.run_id and again.run_id is None
    forced = import_file(db, path, allow_duplicate=True)
    assert forced.run_id not in (None, first.run_id)


def test_server_keys_never_reach_the_database(tmp_path) -> None:
    """A real SGLang /server_info lists admin_api_key and api_key: every stored copy is redacted."""
    import json as _json
    import time as _time

    from spectower.storage import open_database
    from spectower.storage.models import BenchRun

    secret = "apMVnpAwx-6DV8Nyp3vkYxOCXi-SpPcK"
    info = {
        "admin_api_key": secret,
        "api_key": secret,
        "version": "0.5.17",
        "launch_command": f"python -m sglang.launch_server --admin-api-key {secret} --port 1",
    }
    db = open_database(tmp_path / "s.db")
    run = BenchRun(created_at=_time.time(), source="sweep", server_info_json=_json.dumps(info))
    db.save_bench_run(run, [])
    db.record_server_info(db.server_id("http://127.0.0.1:1"), info, _time.time())
    db.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*"))
    assert secret.encode() not in raw
    db = open_database(tmp_path / "s.db")
    from spectower.storage import queries

    run = queries.bench_runs(db)[0]
    assert _json.loads(run.server_info_json)["version"] == "0.5.17"
