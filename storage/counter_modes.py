"""The modes an ``engine_counter_sample`` row (and its rollups) carries, in one place for the collector that
writes them and the queries that read them. Standard library only (no SQLAlchemy): the collector imports it
on every scrape's path.

- ``DECODE_MODES`` (``drafted``, ``gated``): the decode counters' bins, what ``counter_intervals`` reads.
- ``EXTEND_MODES``: the ``extend`` block's two kinds of steady gated step (plugin 0.4.6 on,
  plugin/engine_counters.py) as rows beside them, read only by ``extend_totals``. Those steps are counted in
  their gated bin as well, so a reader of the decode modes must never add these rows in: every reader of the
  table filters on the mode.
- ``OUTSIDE_MODES``: the ``outside`` block (plugin 0.4.13 on): each decode mode's seconds outside every step
  before its steps, as rows of 0 steps and 0 tokens whose ``time_s`` holds those seconds. The decode reads
  fold them into their mode's step time (``engine_counters.with_outside``: what a mode costs a client).
- ``PREFILLED_MODES``: the ``prefilled`` block (plugin 0.4.14 on): each decode mode's steps whose span held a
  prefill, their tokens and their seconds with the seconds outside them, read by ``counter_intervals`` as each
  interval's ``prefilled`` block.
  Those steps are counted in their mode's bin as well: like the extend's rows, a second view.
- ``SLOTS_MODES``: the ``slots`` block (plugin 0.4.15 on): each decode mode's batch sizes of its counted steps
  summed per bin, as rows of 0 steps and 0 seconds whose ``tokens`` hold those slots. A second view of the
  mode's steps (their requests), never added into the decode modes.
- ``MIX_MODES``: the ``mix`` block (plugin 0.4.15 on): the request mix of the windows' exploring parts per bin
  of a part's first batch, as two rows per bin: ``mix_accept`` (``steps`` the parts, ``tokens`` their
  requests, ``time_s`` the sum of those requests' accept per verify) and ``mix_inverse`` (0 steps, 0 tokens,
  ``time_s`` the sum of the accepts' inverses). Counts in the integer columns, sums in ``time_s``: a rollup's
  sums are the block's sums. Not decode steps at all: no decode read adds them in.
  ``counter_intervals`` reads both blocks back as each interval's ``slots`` and ``mix``.

The stored names are spelled out, not derived from the plugin's kind names: they are what the database
holds, and renaming a kind in the plugin must not orphan the rows already stored (tests check the two
agree).
"""

from __future__ import annotations

from ..plugin.engine_counters import MODES

DECODE_MODES: tuple[str, ...] = MODES
# extend kind (plugin.engine_counters.EXTEND_KINDS) -> the mode its rows are stored under
EXTEND_MODES: dict[str, str] = {"kept": "extend_kept", "skipped": "extend_skipped"}
# decode mode (plugin.engine_counters.MODES) -> the mode its seconds outside the steps are stored under
OUTSIDE_MODES: dict[str, str] = {"drafted": "outside_drafted", "gated": "outside_gated"}
# decode mode -> the mode its prefilled steps are stored under
PREFILLED_MODES: dict[str, str] = {"drafted": "prefilled_drafted", "gated": "prefilled_gated"}
# decode mode -> the mode its slots are stored under (in ``tokens``)
SLOTS_MODES: dict[str, str] = {"drafted": "slots_drafted", "gated": "slots_gated"}
# mix field (plugin.engine_counters.MIX_FIELDS) -> (the mode of the row it is stored in, its column)
MIX_MODES: dict[str, tuple[str, str]] = {
    "parts": ("mix_accept", "steps"),
    "requests": ("mix_accept", "tokens"),
    "accept_sum": ("mix_accept", "time_s"),
    "inverse_sum": ("mix_inverse", "time_s"),
}
# the mix's stored modes, each once, in order
MIX_ROWS: tuple[str, ...] = tuple(dict.fromkeys(mode for mode, _ in MIX_MODES.values()))
