"""Collectors: outside sources (SGLang, NVML, dcgm-exporter, Prometheus, load sweeps) -> typed samples.
May import storage and the plugin package's contracts (knob_contract, engine_counters: standard library).

Public API (import from the modules; this package imports nothing so the NVML sampler runs on a bare GPU
host):

- ``collectors.sglang.metrics.parse_metrics(text) -> MetricsSnapshot`` (per DP rank gauges, counters,
  histogram buckets; every SGLang label set 0.5.1-0.5.23), ``spectower.collectors.sglang.server_info.
  parse_server_info(doc) -> ServerInfo`` (facts, per-rank state, the spectower knob; secrets redacted),
  ``spectower.collectors.sglang.loads.parse_loads_json / parse_loads_prometheus -> Loads``.
- ``collectors.sglang.reading.EngineDeriver().derive(ts, snapshot, info, loads) -> list[EngineReading]``
  (rates, bucket-delta p50/p90/p99, restart detection); ``spectower.collectors.sglang.scraper.SglangScraper``.
- ``spectower.collectors.gpu.nvml.NvmlSampler`` (``start() -> [GpuFacts]``, ``sample() -> [GpuReading]``,
  ``poll_pcie()``, ``close()``), ``spectower.collectors.gpu.dcgm.DcgmScraper`` / ``parse_dcgm``.
- ``collectors.prometheus.PrometheusSource`` (``collect_now()``, ``engine_history(start, end, step)``,
  ``dcgm()``).
- ``collectors.daemon.Collector(DaemonConfig, StorageSink).run()``: the ``spectower collect`` daemon.
"""
