"""The tables spectower keeps. Every timestamp is Unix seconds (UTC) as a float.

One table per concept. Samples are narrow rows keyed by (source id, ts) so a chart reads one index
range; nullable columns mean "the source did not report it", never zero.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Table,
    UniqueConstraint,
)
from sqlmodel import Field, SQLModel

from .integers import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, int_or_none  # noqa: F401  (re-exported)


class Meta(SQLModel, table=True):
    """Key/value facts about the database itself (schema_version, ...)."""

    __tablename__ = "meta"
    key: str = Field(primary_key=True)
    value: str


class Server(SQLModel, table=True):
    __tablename__ = "server"
    id: int | None = Field(default=None, primary_key=True)
    url: str = Field(index=True, unique=True)
    served_model_name: str | None = None
    sglang_version: str | None = None
    launch_command: str | None = None
    max_running_requests: int | None = None
    speculative_algorithm: str | None = None
    first_seen: float
    last_seen: float


class ServerInfoSnapshot(SQLModel, table=True):
    """A copy of /server_info, stored only when its stable part changes (hash)."""

    __tablename__ = "server_info_snapshot"
    id: int | None = Field(default=None, primary_key=True)
    server_id: int = Field(foreign_key="server.id", index=True)
    ts: float
    info_hash: str
    info_json: str


class Gpu(SQLModel, table=True):
    __tablename__ = "gpu"
    __table_args__ = (UniqueConstraint("host", "uuid"),)
    id: int | None = Field(default=None, primary_key=True)
    host: str
    index: int
    uuid: str
    name: str | None = None
    memory_total_mib: float | None = None
    power_limit_w: float | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    source: str = "nvml"  # nvml | dcgm | prometheus
    first_seen: float
    last_seen: float


class EngineSample(SQLModel, table=True):
    """One scrape of one SGLang server's DP rank."""

    __tablename__ = "engine_sample"
    __table_args__ = (Index("ix_engine_sample_server_ts", "server_id", "ts"),)
    id: int | None = Field(default=None, primary_key=True)
    server_id: int = Field(foreign_key="server.id")
    dp_rank: int = 0
    ts: float
    num_running_reqs: float | None = None
    num_queue_reqs: float | None = None
    gen_throughput: float | None = None  # SGLang's own gauge, tok/s
    # rate of realtime_tokens_total{mode=decode} (or of generation_tokens_total)
    output_tok_s: float | None = None
    prefill_tok_s: float | None = None  # rate of realtime_tokens_total{mode=prefill_compute}
    request_rate: float | None = None  # rate of num_requests_total
    token_usage: float | None = None
    cache_hit_rate: float | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_num_steps: float | None = None  # active value (0 when gated)
    spec_max_bs: int | None = None  # the spectower knob, from /server_info
    batches_drafted: int | None = None
    batches_gated: int | None = None
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p90_s: float | None = None
    itl_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p90_s: float | None = None
    e2e_p99_s: float | None = None


class EngineCounterSample(SQLModel, table=True):
    """Schema v3: the engine's own decode counters (plugin/engine_counters.py) over one scrape interval
    of one server, DP ranks summed: one row per batch-size bin and mode that saw steps (zero rows are not
    stored). ``control.speedup.estimate`` turns these into the speedup per batch size."""

    __tablename__ = "engine_counter_sample"
    __table_args__ = (Index("ix_engine_counter_sample_server_ts", "server_id", "ts"),)
    id: int | None = Field(default=None, primary_key=True)
    server_id: int = Field(foreign_key="server.id")
    ts: float  # the end of the interval (the scrape that read it)
    batch_size: int  # the bin (plugin/engine_counters.py): a batch counts in the smallest bin >= its size
    # drafted | gated; extend_kept | extend_skipped (storage/counter_modes.py: the extend block's steady gated
    # steps, counted in their gated row too, so every decode reader filters on the mode)
    mode: str
    # 64-bit: after a restart an interval holds the new process's counts since it started
    steps: int = Field(sa_type=BigInteger)
    tokens: int = Field(sa_type=BigInteger)
    time_s: float  # step time (seconds)


class GpuSample(SQLModel, table=True):
    __tablename__ = "gpu_sample"
    __table_args__ = (Index("ix_gpu_sample_gpu_ts", "gpu_id", "ts"),)
    id: int | None = Field(default=None, primary_key=True)
    gpu_id: int = Field(foreign_key="gpu.id")
    ts: float
    lost: bool = False
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    pcie_tx_bytes_s: float | None = None
    pcie_rx_bytes_s: float | None = None
    nvlink_tx_bytes_s: float | None = None
    nvlink_rx_bytes_s: float | None = None
    throttle_reasons: int | None = None  # NVML clock-event reasons bitmask
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    xid_errors: int | None = None


class GpuProcessSample(SQLModel, table=True):
    __tablename__ = "gpu_process_sample"
    __table_args__ = (Index("ix_gpu_process_sample_gpu_ts", "gpu_id", "ts"),)
    id: int | None = Field(default=None, primary_key=True)
    gpu_id: int = Field(foreign_key="gpu.id")
    ts: float
    pid: int
    process_name: str | None = None
    used_memory_mib: float | None = None


class ControlEvent(SQLModel, table=True):
    """The audit trail: every attempt to move the knob, confirmed or not."""

    __tablename__ = "control_event"
    __table_args__ = (
        Index("ix_control_event_server_ts", "server_url", "ts"),
        Index("ix_control_event_ts", "ts"),  # schema v2: the audit page lists all servers by time
    )
    id: int | None = Field(default=None, primary_key=True)
    ts: float
    actor: str  # "operator:<name>" or "policy:<mode>"
    server_url: str
    action: str  # set | auto-start | auto-stop | pause | release | explore | freeze-gc
    old_max_bs: int | None = None
    new_max_bs: int | None = None
    reason: str
    confirmed: bool = False
    per_rank_json: str | None = None  # read-back per DP rank
    error: str | None = None  # why it was not applied or its outcome is unknown (empty when confirmed)
    # schema v4: the knob request's id (plugin/knob_contract.py: the server's lock names the set that took
    # it, so `control get` finds who holds it here), and what else the row says (the lock a set took)
    request_id: int | None = Field(default=None, sa_type=BigInteger)
    note: str | None = None


class BenchRun(SQLModel, table=True):
    __tablename__ = "bench_run"
    id: int | None = Field(default=None, primary_key=True)
    created_at: float
    source: str  # "sweep" or "import:<file name>"
    tag: str | None = None
    server_url: str | None = None
    backend: str | None = None
    dataset_name: str | None = None
    served_model_name: str | None = None
    sglang_version: str | None = None
    server_info_json: str | None = None
    gpu_inventory_json: str | None = None
    params_json: str | None = None  # sweep parameters (input/output len, api, warmup, ...)
    crossover: float | None = None
    crossover_lo: float | None = None
    crossover_hi: float | None = None
    best_max_bs: int | None = None
    # schema v2: SHA-256 of an imported file, so importing the same file twice is noticed
    source_sha256: str | None = Field(default=None, index=True)


class BenchPoint(SQLModel, table=True):
    """One (concurrency, speculation on/off) measurement, in SGLang bench_serving's terms."""

    __tablename__ = "bench_point"
    __table_args__ = (Index("ix_bench_point_run", "run_id", "concurrency"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="bench_run.id")
    concurrency: float | None = None  # max_concurrency (closed loop); None for open-loop imports
    spec_on: bool | None = None  # None when an import cannot tell
    request_rate: float | None = None
    completed: int | None = None
    duration_s: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput: float | None = None
    input_throughput: float | None = None
    output_throughput: float | None = None
    total_throughput: float | None = None
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    p90_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_e2e_latency_ms: float | None = None
    median_e2e_latency_ms: float | None = None
    p90_e2e_latency_ms: float | None = None
    p99_e2e_latency_ms: float | None = None
    accept_length: float | None = None
    ratio_ci_lo: float | None = None  # spec-on/spec-off ratio interval at this concurrency (sweeps)
    ratio_ci_hi: float | None = None
    extra_json: str | None = None  # every other key of the source line, so import->export is lossless


class ServerPause(SQLModel, table=True):
    """Schema v6: a pause of one of a server's processes as its plugin reported it (``/server_info``'s
    ``loop``, ``gc`` and ``launcher`` blocks, read by collectors/sglang/pauses.py): a scheduler's output
    stall, a long garbage collection, or the launcher's Python held. The plugin keeps only the newest few;
    stored, they stay beside the latency charts they explain. One row per pause however often the same list
    is read again: unique on (server, process, kind, end), and the writer skips a row already there."""

    __tablename__ = "server_pause"
    __table_args__ = (
        UniqueConstraint("server_id", "process", "kind", "ts", name="uq_server_pause"),
        # a chart reads one server's pauses over its window: one index range
        Index("ix_server_pause_server_ts", "server_id", "ts"),
        {"info": {"on_duplicate": "ignore"}},  # storage/writer.py: a row read again is skipped, not refused
    )
    id: int | None = Field(default=None, primary_key=True)
    server_id: int = Field(foreign_key="server.id")
    ts: float  # the pause's end (Unix seconds), as the plugin stamps it
    seconds: float
    kind: str  # stall | gc | held (PAUSE_KINDS)
    process: str  # "launcher" or "rank N" (the DP rank)
    detail: str | None = None  # a stall's cause in one line, a collection's "gen 2"


PAUSE_KINDS = ("stall", "gc", "held")


class CollectionGap(SQLModel, table=True):
    __tablename__ = "collection_gap"
    id: int | None = Field(default=None, primary_key=True)
    source: str  # sglang | nvml | dcgm | prometheus
    target: str  # URL or host
    start_ts: float
    end_ts: float | None = None  # None while the outage lasts
    reason: str


class CollectorHealth(SQLModel, table=True):
    __tablename__ = "collector_health"
    __table_args__ = (UniqueConstraint("source", "target"),)
    id: int | None = Field(default=None, primary_key=True)
    source: str
    target: str
    updated_ts: float
    last_success_ts: float | None = None
    errors_total: int = 0
    last_error: str | None = None
    lag_s: float | None = None


class PolicyState(SQLModel, table=True):
    """What a policy learned, persisted so a restart does not start from nothing."""

    __tablename__ = "policy_state"
    server_url: str = Field(primary_key=True)
    updated_ts: float
    mode: str
    paused_until: float | None = None  # a manual set pauses the policy
    state_json: str
    # what the policy's runner said last (its hold's reason, a set, a pause: one line) and since when
    said: str | None = None
    said_ts: float | None = None


# --- schema v2: rollups (min/mean/max per 1-minute and 1-hour bucket) -----------------------------
# Wide tables (one row per source and bucket, four columns per metric) so one chart of 30 days reads
# 720 hourly rows per source. The metric lists are frozen here: a new sample column needs a new
# migration that adds its rollup columns too (storage/schema.py).

ENGINE_ROLLUP_METRICS: tuple[str, ...] = (
    "num_running_reqs", "num_queue_reqs", "gen_throughput", "output_tok_s", "prefill_tok_s",
    "request_rate", "token_usage", "cache_hit_rate", "spec_accept_length", "spec_accept_rate",
    "spec_num_steps", "spec_max_bs", "batches_drafted", "batches_gated",
    "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "itl_p50_s", "itl_p90_s", "itl_p99_s",
    "e2e_p50_s", "e2e_p90_s", "e2e_p99_s",
)  # fmt: skip
GPU_ROLLUP_METRICS: tuple[str, ...] = (
    "gpu_util_pct", "mem_util_pct", "memory_used_mib", "memory_total_mib", "power_w", "power_limit_w",
    "temperature_c", "sm_clock_mhz", "mem_clock_mhz", "pcie_tx_bytes_s", "pcie_rx_bytes_s",
    "nvlink_tx_bytes_s", "nvlink_rx_bytes_s", "ecc_corrected", "ecc_uncorrected", "xid_errors",
)  # fmt: skip


def _metric_columns(metrics: tuple[str, ...]) -> list[Column]:  # type: ignore[type-arg,unused-ignore]
    cols: list[Column] = []  # type: ignore[type-arg,unused-ignore]
    for m in metrics:
        cols += [Column(f"{m}_min", Float), Column(f"{m}_max", Float), Column(f"{m}_sum", Float),
                 Column(f"{m}_n", Integer, nullable=False, server_default="0")]  # fmt: skip
    return cols


def _rollup_table(
    name: str, sources: list[Column[Any]], metrics: tuple[str, ...], key: tuple[str, ...]
) -> Table:
    """One wide rollup table: per resolution, source (``sources``, the columns naming it) and bucket, the
    row count and min / max / sum / n of each metric; primary key ``key`` (the order its index reads)."""
    return Table(
        name,
        SQLModel.metadata,
        Column("res_s", Integer, nullable=False),  # 60 or 3600
        *sources,
        Column("bucket_ts", Float, nullable=False),  # start of the bucket, a multiple of res_s
        Column("n", Integer, nullable=False),  # raw samples in the bucket
        *_metric_columns(metrics),
        PrimaryKeyConstraint(*key, name=f"pk_{name}"),
    )


engine_rollup = _rollup_table(
    "engine_rollup",
    [Column("server_id", Integer, nullable=False), Column("dp_rank", Integer, nullable=False)],
    ENGINE_ROLLUP_METRICS,
    # bucket_ts before dp_rank: a chart of all ranks of one server reads one index range
    ("res_s", "server_id", "bucket_ts", "dp_rank"),
)
gpu_rollup = _rollup_table(
    "gpu_rollup",
    [Column("gpu_id", Integer, nullable=False)],
    GPU_ROLLUP_METRICS,
    ("res_s", "gpu_id", "bucket_ts"),
)

# --- schema v3: the decode counters' rollups (sums per 1-minute and 1-hour bucket) ---------------------
# The same wide layout, so storage/rollups.py keeps them with the engine and GPU ones; only the *_sum
# columns mean anything for counters (an interval's sum of steps, tokens, step time).
COUNTER_ROLLUP_METRICS: tuple[str, ...] = ("steps", "tokens", "time_s")

engine_counter_rollup = _rollup_table(
    "engine_counter_rollup",
    [
        Column("server_id", Integer, nullable=False),
        Column("batch_size", Integer, nullable=False),
        Column("mode", String, nullable=False),
    ],
    COUNTER_ROLLUP_METRICS,
    # bucket_ts before the bin: one server's estimate over a window reads one index range
    ("res_s", "server_id", "bucket_ts", "batch_size", "mode"),
)

rollup_state = Table(
    "rollup_state",
    SQLModel.metadata,
    Column("sample_table", String, primary_key=True),  # engine_sample | gpu_sample
    Column("last_id", Integer, nullable=False),  # raw rows with id <= last_id are in the rollups
    Column("updated_ts", Float, nullable=False),
)


# --- schema v5: sealed samples, one chunk (storage/chunks.py) per series and time range ----------------
# engine_sample and gpu_sample are the head: the newest minutes of every series, as rows. The writer's
# maintenance (storage/sealed.py) moves older rows, once folded into the rollups, into these tables in
# the same transaction that deletes them from the head. ``data`` holds the timestamps and every value
# column of the sample table but its id and source columns, in ``sealed.ChunkSpec.columns``' order.


def _chunk_table(name: str, sources: list[Column[Any]]) -> Table:
    return Table(
        name,
        SQLModel.metadata,
        Column("id", Integer, primary_key=True),
        *sources,
        Column("start_ts", Float, nullable=False),  # the chunk's earliest and latest sample
        Column("end_ts", Float, nullable=False),
        Column("n", Integer, nullable=False),  # samples in the chunk
        Column("data", LargeBinary, nullable=False),
        # a chart reads the chunks of its sources that end at or after its start: one index range each
        Index(f"ix_{name}_source_end", *[c.name for c in sources], "end_ts"),
    )


engine_chunk = _chunk_table(
    "engine_chunk",
    [Column("server_id", Integer, nullable=False), Column("dp_rank", Integer, nullable=False)],
)
gpu_chunk = _chunk_table("gpu_chunk", [Column("gpu_id", Integer, nullable=False)])
