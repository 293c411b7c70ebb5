"""Issue #15 item 4, on SQLite and PostgreSQL: histories that round-trip. A spectower sweep keeps its
crossover, best knob, parameters and server URL through export -> import; a file holding several runs
comes back as several runs; a PD router's server_info yields the decode workers' facts; a value of the
wrong type in a bench file is named per line; nvidia-smi CSV logs become GPU history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spectower.collectors.sglang.server_info import parse_server_info
from spectower.console.cli import app
from spectower.storage import open_database, queries
from spectower.storage.bench_serving import import_file
from spectower.storage.export import export_bench
from spectower.storage.files import finite_or_null
from spectower.storage.gpu_csv import GpuCsvError, import_gpu_csv, import_gpu_csvs, read_gpu_csv
from spectower.storage.models import BenchPoint, BenchRun
from sqlalchemy import text
from typer.testing import CliRunner

from tests.conftest import REAL_DATA

INFO = json.loads((REAL_DATA / "sglang-0.5.17-h200/server_info_after.json").read_text())


def _sweep(tag: str, crossover: float) -> tuple[BenchRun, list[BenchPoint]]:
    run = BenchRun(
        created_at=1_764_000_000.0 + crossover,
        source="sweep",
        tag=tag,
        server_url="http://10.0.0.5:30000",
        backend="sglang",
        served_model_name="glm-5",
        sglang_version="0.5.23",
        server_info_json=json.dumps({"version": "0.5.23", "speculative_algorithm": "EAGLE3"}),
        gpu_inventory_json=json.dumps([{"index": 0, "name": "RTX PRO 6000"}]),
        params_json=json.dumps({"random_input_len": 512, "random_output_len": 128, "warmup": 2}),
        crossover=crossover,
        crossover_lo=crossover - 2,
        crossover_hi=crossover + 3,
        best_max_bs=int(crossover),
    )
    points = [
        BenchPoint(concurrency=c, spec_on=on, output_throughput=100.0 * c + on, completed=20,
                   ratio_ci_lo=0.9, ratio_ci_hi=1.2)
        for c in (1, 8, 32) for on in (True, False)
    ]  # fmt: skip
    return run, points


def _run_facts(run: BenchRun) -> dict[str, object]:
    return {k: v for k, v in run.model_dump().items() if k not in ("id", "source_sha256")}


def _points(db: object, run_id: int) -> list[dict[str, object]]:
    keep = ("concurrency", "spec_on", "output_throughput", "completed", "ratio_ci_lo", "ratio_ci_hi")
    return [{k: getattr(p, k) for k in keep} for p in queries.bench_points(db, run_id)]  # type: ignore[arg-type]


def test_four_sweeps_in_one_file_come_back_as_four_runs(db_url: str, tmp_path: Path) -> None:
    db = open_database(db_url)
    try:
        ids = [db.save_bench_run(*_sweep(f"t{i}", 10.0 + i)) for i in range(4)]
        out = tmp_path / "runs.jsonl"
        assert export_bench(db, ids, "jsonl", out) == 24
        got = import_file(db, out, allow_duplicate=True)
        assert len(got.run_ids) == 4 and got.points == 24 and got.warnings == []
        for old, new in zip(ids, got.run_ids, strict=True):
            # crossover, best knob, parameters, server URL, GPU inventory: all back
            assert _run_facts(queries.bench_run(db, new)) == _run_facts(queries.bench_run(db, old))
            assert _points(db, new) == _points(db, old)
        # a single sweep round-trips too
        one = tmp_path / "one.jsonl"
        export_bench(db, [ids[2]], "jsonl", one)
        (back,) = import_file(db, one).run_ids
        assert _run_facts(queries.bench_run(db, back)) == _run_facts(queries.bench_run(db, ids[2]))
    finally:
        db.close()


def test_imported_file_exports_byte_for_byte(db_url: str, tmp_path: Path) -> None:
    db = open_database(db_url)
    try:
        for f in sorted((REAL_DATA / "bench_serving").glob("*.jsonl")):
            rid = import_file(db, f).run_id or 0
            out = tmp_path / f.name
            export_bench(db, [rid], "jsonl", out)
            # every line as it was, but strict JSON: the client's "request_rate": Infinity comes out null
            assert [json.loads(x, parse_constant=_refuse) for x in out.read_text().splitlines()] == [
                finite_or_null(json.loads(x)) for x in f.read_text().splitlines() if x.strip()
            ]
    finally:
        db.close()


def _refuse(token: str) -> None:
    raise AssertionError(f"bare {token} in an exported line")


def _pd_router_info() -> dict[str, object]:
    decode = dict(INFO)
    decode["speculative_algorithm"] = "EAGLE3"
    prefill = dict(INFO)
    prefill["speculative_algorithm"] = None
    second = json.loads(json.dumps(decode))
    return {"prefill": [prefill], "decode": [decode, second]}


def test_pd_router_server_info_gives_the_decode_workers_facts() -> None:
    info = _pd_router_info()
    parsed = parse_server_info(info)
    assert parsed.version == INFO["version"] and parsed.served_model_name == INFO["served_model_name"]
    assert parsed.speculative_algorithm == "EAGLE3"
    n = len(INFO.get("internal_states") or [])
    assert [r.dp_rank for r in parsed.ranks] == list(range(2 * n))  # both decode workers, apart
    assert set(parsed.info) == {"prefill", "decode"}  # the router's document is what is kept


def test_pd_router_bench_file_gives_version_model_and_speculation(db_url: str, tmp_path: Path) -> None:
    f = tmp_path / "pd.jsonl"
    line = {"backend": "sglang", "max_concurrency": 4, "completed": 10, "output_throughput": 55.0,
            "server_info": _pd_router_info()}  # fmt: skip
    f.write_text(json.dumps(line) + "\n")
    db = open_database(db_url)
    try:
        r = import_file(db, f)
        run = queries.bench_run(db, r.run_id or 0)
        assert (run.sglang_version, run.served_model_name) == (INFO["version"], INFO["served_model_name"])
        assert [p.spec_on for p in queries.bench_points(db, r.run_id or 0)] == [True]
    finally:
        db.close()


def test_wrong_types_in_a_bench_file_are_named_per_line(db_url: str, tmp_path: Path) -> None:
    f = tmp_path / "typed.jsonl"
    f.write_text(
        '{"max_concurrency": 1, "completed": 10, "output_throughput": "fast"}\n'
        '{"max_concurrency": 2, "completed": 10, "output_throughput": [1, 2]}\n'
        '{"max_concurrency": 4, "completed": -5, "output_throughput": 10.0}\n'
        '{"max_concurrency": 8, "completed": 10, "output_throughput": 20.0}\n'
    )
    db = open_database(db_url)
    try:
        r = import_file(db, f)
        assert [(n, w.split(" (")[0]) for n, w in r.warnings] == [
            (1, 'output_throughput: "fast" is not a number'),
            (2, "output_throughput: [1, 2] is not a number"),
            (3, "completed: -5 is negative"),
        ]
        pts = queries.bench_points(db, r.run_id or 0)
        assert [(p.output_throughput, p.completed) for p in pts] == [(None, 10), (None, 10), (10.0, None),
                                                                     (20.0, 10)]  # fmt: skip
        assert json.loads(pts[2].extra_json or "")["completed"] == -5  # kept, not lost
    finally:
        db.close()
    code = CliRunner().invoke(app, ["import", "bench-serving", str(f), "--db", str(tmp_path / "c.db")])
    assert code.exit_code == 0
    assert 'line 1: output_throughput: "fast" is not a number' in code.output
    assert "line 3: completed: -5 is negative" in code.output


NVIDIA_SMI_CSV = """\
timestamp, index, uuid, name, driver_version, utilization.gpu [%], utilization.memory [%], \
memory.total [MiB], memory.used [MiB], power.draw [W], power.limit [W], temperature.gpu, clocks.sm [MHz]
2025/11/20 10:00:00.100, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 570.86, 35 %, 10 %, 81559 MiB, 1234 MiB, \
250.12 W, 700.00 W, 45, 1980 MHz
2025/11/20 10:00:00.120, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 570.86, [N/A], [N/A], 81559 MiB, 0 MiB, \
[N/A], [Not Supported], 40, [N/A]
2025/11/20 10:00:01.100, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 570.86, 36 %, 11 %, 81559 MiB, 1240 MiB, \
251.00 W, 700.00 W, 46, 1980 MHz
2025/11/20 10:00:01.120, 1, GPU-bbbb, NVIDIA H100 80GB HBM3, 570.86, lots, [N/A], 81559 MiB, 0 MiB, \
[N/A], [Not Supported], 40, [N/A]
"""


def test_nvidia_smi_csv_into_gpu_history(db_url: str, tmp_path: Path) -> None:
    f = tmp_path / "gpu.csv"
    f.write_text(NVIDIA_SMI_CSV)
    db = open_database(db_url)
    try:
        r = import_gpu_csv(db, f, host="node7")
        assert r.samples == 4 and len(r.gpus) == 2
        assert r.warnings == [(5, "utilization.gpu: 'lots' is not a number (left empty)")]
        g0, g1 = queries.gpus(db, host="node7")
        assert (g0.uuid, g0.name, g0.driver_version, g0.source) == ("GPU-aaaa", "NVIDIA H100 80GB HBM3",
                                                                    "570.86", "nvidia-smi")  # fmt: skip
        s0 = queries.series(db, "gpu", g0.id or 0, "power_w", 1_763_632_800.0, 1_763_632_802.0, 10)
        assert [b.mean for b in s0.points] == [250.12, 251.0]
        # [N/A] is empty, never 0
        s1 = queries.series(db, "gpu", g1.id or 0, "power_w", 1_763_632_800.0, 1_763_632_802.0, 10)
        assert s1.points == []
        t1 = queries.series(db, "gpu", g1.id or 0, "temperature_c", 1_763_632_800.0, 1_763_632_802.0, 10)
        assert [b.mean for b in t1.points] == [40.0, 40.0]
    finally:
        db.close()


def test_nvidia_smi_csv_without_header_is_one_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "noheader.csv"
    f.write_text("2025/11/20 10:00:00.100, 0, GPU-aaaa, 35 %\n")
    db = open_database(tmp_path / "g.db")
    try:
        with pytest.raises(GpuCsvError, match="line 1: no header"):
            import_gpu_csv(db, f, host="h")
    finally:
        db.close()
    res = CliRunner().invoke(
        app, ["import", "gpu-csv", str(f), "--host", "h", "--db", str(tmp_path / "g.db")]
    )
    assert res.exit_code == 2 and "line 1: no header" in res.output and "Traceback" not in res.output


def test_import_gpu_csv_command(tmp_path: Path) -> None:
    f = tmp_path / "gpu.csv"
    f.write_text(NVIDIA_SMI_CSV)
    res = CliRunner().invoke(
        app, ["import", "gpu-csv", str(f), "--host", "node7", "--db", str(tmp_path / "g.db")]
    )
    assert res.exit_code == 0, res.output
    assert "4 sample(s) of 2 GPU(s) on node7" in res.output
    assert "line 5: utilization.gpu: 'lots' is not a number (left empty)" in res.output


NO_HEADER_CSV = "2025/11/20 10:00:00.100, 0, GPU-cccc, 35 %\n"
LATER_LINE = (
    "2025/11/20 10:00:02.100, 0, GPU-aaaa, NVIDIA H100 80GB HBM3, 570.86, 37 %, 12 %, 81559 MiB, 1250 MiB, "
    "252.00 W, 700.00 W, 47, 1980 MHz\n"
)


def _gpu_samples(db: object) -> int:
    with db.engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(text("SELECT count(*) FROM gpu_sample")).scalar_one())


def test_gpu_csv_logs_are_imported_all_or_nothing(db_url: str, tmp_path: Path) -> None:
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text(NVIDIA_SMI_CSV)
    bad.write_text(NO_HEADER_CSV)
    db = open_database(db_url)
    try:
        with pytest.raises(GpuCsvError) as caught:
            import_gpu_csvs(db, [good, bad], host="node7")
        assert str(caught.value).startswith(f"{bad}: line 1: no header with a timestamp column")
        # the good log before it left nothing either: no GPU, no sample
        assert queries.gpus(db) == [] and _gpu_samples(db) == 0
    finally:
        db.close()


def test_gpu_csv_samples_already_stored_are_skipped(db_url: str, tmp_path: Path) -> None:
    f, later = tmp_path / "gpu.csv", tmp_path / "later.csv"
    f.write_text(NVIDIA_SMI_CSV)
    later.write_text(NVIDIA_SMI_CSV + LATER_LINE)  # the first log, then one sample more
    db = open_database(db_url)
    try:
        first = import_gpu_csv(db, f, host="node7")
        assert (first.samples, first.skipped) == (4, 0)
        again = import_gpu_csv(db, f, host="node7")
        assert (again.samples, again.skipped, len(again.gpus)) == (0, 4, 2)
        assert _gpu_samples(db) == 4  # not doubled
        overlapping = import_gpu_csv(db, later, host="node7")
        assert (overlapping.samples, overlapping.skipped) == (1, 4)
        # the same log twice in one import is written once; another host's GPUs are other GPUs
        a, b = import_gpu_csvs(db, [f, f], host="node8")
        assert ((a.samples, a.skipped), (b.samples, b.skipped)) == ((4, 0), (0, 4))
        assert _gpu_samples(db) == 9
    finally:
        db.close()


def test_gpu_csv_values_no_reading_has_are_warnings(tmp_path: Path) -> None:
    f = tmp_path / "odd.csv"
    f.write_text(
        "timestamp, index, utilization.gpu [%], power.draw [W]\n"
        "0001/01/01 00:00:00.000, 0, 5 %, 100 W\n"  # UTC+5: before year 1 (an OverflowError traceback)
        "2025/11/20 10:00:00.100, 0, nan, 1e400 W\n"  # not finite: was stored empty without a word
    )
    log = read_gpu_csv(f, utc_offset_h=5.0)
    assert log.warnings == [
        (2, "timestamp '0001/01/01 00:00:00.000' with the UTC offset is outside the calendar (skipped)"),
        (3, "utilization.gpu: 'nan' is not a number (left empty)"),
        (3, "power.draw: '1e400 W' is not a number (left empty)"),
    ]
    assert [values for _, _, values in log.samples] == [{"gpu_util_pct": None, "power_w": None}]


def test_import_gpu_csv_command_is_all_or_nothing_and_skips_what_is_stored(tmp_path: Path) -> None:
    good, bad, db = tmp_path / "good.csv", tmp_path / "bad.csv", str(tmp_path / "g.db")
    good.write_text(NVIDIA_SMI_CSV)
    bad.write_text(NO_HEADER_CSV)
    res = CliRunner().invoke(app, ["import", "gpu-csv", str(good), str(bad), "--host", "node7", "--db", db])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.output.splitlines() == [
        f"error: {bad}: line 1: no header with a timestamp column (log with "
        "--query-gpu=timestamp,index,uuid,... --format=csv, not noheader); nothing imported"
    ]
    d = open_database(db)
    try:
        assert queries.gpus(d) == [] and _gpu_samples(d) == 0
    finally:
        d.close()
    argv = ["import", "gpu-csv", str(good), "--host", "node7", "--db", db]
    assert "4 sample(s) of 2 GPU(s) on node7\n" in CliRunner().invoke(app, argv).output
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output
    assert "0 sample(s) of 2 GPU(s) on node7 (4 already stored, skipped)" in res.output
