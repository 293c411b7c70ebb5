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
