"""Load sweeps (speculation on vs off per concurrency) and the load walker, measured from the client side.
May import storage, the collectors' parsers and plumbing, and plugin.knob_contract (the knob is a protocol).

Modules, one concept each: ``sse`` (stream parsing), ``prompts`` (seeded local prompts), ``stream`` (one
streamed request -> ``RequestRecord``), ``loadgen`` (the closed loop), ``stats`` (bench_serving's figures),
``ratio`` (spec-on/spec-off ratio, crossover, best knob), ``server`` (server_info, loads, counters, flush,
through the collectors' parsers), ``knob`` (the ``Knob`` protocol a sweep borrows; control implements it),
``sweep`` (orchestration), ``walk`` (the load walker), ``profile_out``, ``persist``, ``compare``.
"""
