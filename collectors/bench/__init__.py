"""Load sweeps: speculation on versus off at each concurrency, measured from the client side.

Modules, one concept each: ``sse`` (stream parsing), ``prompts`` (seeded local prompts), ``stream`` (one
streamed request -> ``RequestRecord``), ``loadgen`` (the closed loop), ``stats`` (bench_serving's figures),
``ratio`` (spec-on/spec-off ratio, crossover, best knob), ``server`` (server_info, counters, flush),
``knob`` (set/read the speculation knob), ``sweep`` (orchestration),
``profile_out``, ``persist``, ``compare``.
"""
