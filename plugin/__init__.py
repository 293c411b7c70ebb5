"""What SGLang loads: the code that runs inside SGLang's processes, and the wire contracts both sides share.

The bottom floor (tests/test_floors.py): standard library only, and sglang or torch imported lazily inside
hooks; nothing else of ours. SGLang's ``load_plugins()`` finds it through the ``sglang.srt.plugins`` entry
points (``knob_gate.register``, ``gated_decode.register``, ``loop_stalls.register``), in the launcher and in
every scheduler process.

- ``knob_gate``: the speculation knob's gate (a live ceiling on the batch size at which EAGLE drafts), the
  engine's decode counters and its ``/server_info`` block.
- ``gated_decode`` and ``seq_lens_mirror``: off means off (a gated batch runs a plain server's decode).
- ``loop_stalls``: the scheduler's output stalls (each long gap between two batch results, and where its time
  went), for the replays' pauses and an operator's "why did latency double".
- ``knob_contract``, ``engine_counters``, ``explore``: the knob's wire contract, the decode counters' format
  and arithmetic, and which batches explore; the client, the collectors, storage and the simulator import
  them from here, so both sides of the wire read one definition.
"""
