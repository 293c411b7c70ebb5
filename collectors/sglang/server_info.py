"""SGLang ``/server_info`` -> ``ServerInfo``: THE typed model of that document and its one parser.

Everything that reads ``/server_info`` goes through ``parse_server_info``: the collector (facts, per-rank
state, snapshots), the knob client (control/knob.py builds its ``KnobState`` on it), the sweeps and the
load walker (collectors/bench), and the Benchmarks page's sweep watcher. So there is one rule for
``max_running_requests`` (``max_running_requests_of``) and one stable hash (``storage.snapshots``).

``/server_info`` is the flat, resolved server args plus ``internal_states`` (one dict per DP rank, with
runtime overrides applied). The spectower plugin adds ``internal_states[i]["spectower"]`` (the knob, its
owner and lock, the engine's counters: plugin/knob_contract.py and docs/design.md). A PD router answers
``{"prefill": [...], "decode": [...]}``; its decode workers' facts and ranks are read. Secrets (``api_key``,
``admin_api_key``, key passwords, ``--api-key`` in ``launch_command``) are redacted before anything is kept;
``ServerInfo.info`` is the redacted document as it came, for readers of blocks the model does not type
(collectors/sglang/counters.py reads the counters from it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from ...plugin import knob_contract
from ...storage.integers import int_or_none
from ...storage.redact import redact
from ...storage.snapshots import stable_server_info_hash


class ServerInfoError(ValueError):
    """/server_info answered something that is not a server_info object."""


# -- lenient field types: a value of the wrong type is unknown (None), never an error, since one odd field of
# a 300-key document must not cost the scrape; ints are range-checked where they enter (spec_max_bs 1e20 is
# not a value any database column holds).


def _int(value: Any) -> int | None:
    return int_or_none(value)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float range
        return None
    return number if math.isfinite(number) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _map(value: Any) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


_OWNERS = frozenset({*knob_contract.WRITER_NAMES.values(), knob_contract.OWNER_FREE})


def _owner(value: Any) -> str | None:
    return value if isinstance(value, str) and value in _OWNERS else None


def _adaptive_config(value: Any) -> str | dict[str, Any] | None:
    """``--speculative-adaptive-config``: a path, or (some launchers) the document inline."""
    if isinstance(value, str):
        return value or None
    return dict(value) if isinstance(value, Mapping) and value else None


Int = Annotated[int | None, BeforeValidator(_int)]
Float = Annotated[float | None, BeforeValidator(_float)]
Str = Annotated[str | None, BeforeValidator(_str)]
Bool = Annotated[bool | None, BeforeValidator(_bool)]
Map = Annotated[dict[str, Any] | None, BeforeValidator(_map)]
AdaptiveConfig = Annotated[str | dict[str, Any] | None, BeforeValidator(_adaptive_config)]

# internal_states[i] keys a rank reports itself, and the plugin's block keys, as RankState reads them.
_RANK_KEYS = ("dp_rank", "speculative_num_steps", "avg_spec_accept_length", "last_gen_throughput")
_PLUGIN_KEYS = (
    "spec_max_bs", "batches_drafted", "batches_gated", "plugin_version", "refused", "owner", "lock",
    "last_write", "last_refused", "policy_last", "server_time", "gated_decode", "seq_lens_mirror", "explore",
    "gc", "gate", "loop", "launcher",
)  # fmt: skip


class RankState(BaseModel):
    """One DP rank: ``internal_states[i]`` and the spectower plugin's block in it."""

    model_config = ConfigDict(frozen=True)

    dp_rank: int
    speculative_num_steps: Int = None  # the active adaptive tier (runtime override applied): 0 while gated
    avg_spec_accept_length: Float = None  # cumulative since start / flush
    last_gen_throughput: Float = None
    plugin: bool = False  # the rank has the spectower plugin's block (with the knob in it)
    spec_max_bs: Int = None
    batches_drafted: Int = None
    batches_gated: Int = None
    plugin_version: Str = None
    refused: Str = None  # the plugin's own reason it cannot honour the knob on this rank
    # Ownership (plugin/knob_contract.py); None on a plugin that predates it.
    owner: Annotated[str | None, BeforeValidator(_owner)] = None  # manual / sweep while locked, else policy
    lock: Map = None  # {"writer", "since", "expires_at"}; None expiry: until released
    last_write: Map = None
    last_refused: Map = None
    policy_last: Map = None
    server_time: Float = None
    # The off path (plugin/gated_decode.py, plugin/seq_lens_mirror.py): None where not loaded.
    gated_decode: Map = None  # draft extends skipped while gated, batches drained before drafting again
    seq_lens_mirror: Map = None  # flashinfer: gated batches' host lengths remembered, not waited for
    explore: Map = None  # the share, batches explored and the window among gated batches (plugin/explore.py)
    gc: Map = None  # the scheduler process's garbage collections, the long ones timed (plugin/gc_pauses.py)
    # the gate's own counts (plugin/gate.py): switches, band_changes (SGLang's own steps), verifies dropped
    gate: Map = None
    # the scheduler's output stalls: long gaps between batch results and their breakdown (loop_stalls.py)
    loop: Map = None
    # SGLang's launcher (HTTP server, tokenizer manager): its long collections, its Python held, what is
    # frozen (plugin/launcher_state.py); the same block on every rank, the launcher being one process
    launcher: Map = None

    # the knob client's names for the same two values (`control get` prints them)
    @property
    def active_num_steps(self) -> int | None:
        return self.speculative_num_steps

    @property
    def accept_length(self) -> float | None:
        return self.avg_spec_accept_length

    @property
    def ownership(self) -> bool:
        """The plugin keeps who holds the knob (plugin >= 0.2.0, or the simulator)."""
        return self.owner is not None

    def lock_left_s(self) -> float | None:
        """Seconds until the lock expires by the server's clock (None: no lock, or until released)."""
        expires = (self.lock or {}).get("expires_at")
        if not isinstance(expires, int | float) or self.server_time is None:
            return None
        return max(0.0, float(expires) - self.server_time)


# SpeculativeAlgorithm.is_eagle(): the algorithms whose draft tokens take output slots
EAGLE_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "FROZEN_KV_MTP"})


class ServerInfo(BaseModel):
    """The server's facts (a PD router's decode workers') and its ranks."""

    model_config = ConfigDict(frozen=True)

    version: Str = None
    served_model_name: Str = None
    launch_command: Str = None
    max_running_requests: Int = None  # max_running_requests_of(): the most one DP rank runs at once
    max_req_input_len: Int = None  # the longest prompt the server takes (its context less a few tokens)
    speculative_algorithm: Str = None
    speculative_num_steps: Int = None
    speculative_adaptive: Bool = None
    speculative_adaptive_config: AdaptiveConfig = None
    speculative_eagle_topk: Int = None
    speculative_num_draft_tokens: Int = None
    max_speculative_num_draft_tokens: Int = None  # SGLang >= 0.5.2x: the most an adaptive state drafts
    decode_log_interval: Int = None
    tp_size: Int = None
    dp_size: Int = None
    enable_metrics: Bool = None
    enable_metrics_for_all_schedulers: Bool = None
    startup_fingerprint: str | None = None  # startup_time as canonical JSON: one value per launch
    ranks: tuple[RankState, ...] = ()
    info: dict[str, Any] = {}  # the redacted document as it came
    info_hash: str = ""  # storage.snapshots.stable_server_info_hash(info)

    @property
    def knob(self) -> int | None:
        """The spectower knob if every rank agrees, else None (see ``ranks`` for the per-rank values)."""
        values = {r.spec_max_bs for r in self.ranks}
        return values.pop() if len(values) == 1 else None

    @property
    def reserved_output_tokens(self) -> int:
        """Token slots SGLang counts on top of every prompt (managers/utils.compute_num_reserved_tokens):
        EAGLE stores its draft tokens in the request's output slots, so a prompt + max_new_tokens must leave
        room for them too; 0 for any other algorithm. On 2026-12-03 an EAGLE-3 server with 4 draft tokens
        refused 127 of a replay's 1 738 prompts that fit without them ("4 036 tokens from the input")."""
        if (self.speculative_algorithm or "").upper() not in EAGLE_ALGORITHMS:
            return 0
        bounds = [self.speculative_num_draft_tokens or 0, self.max_speculative_num_draft_tokens or 0]
        if self.speculative_eagle_topk and self.speculative_num_steps:
            bounds.append(self.speculative_eagle_topk * self.speculative_num_steps)
        return max(bounds)

    @property
    def avg_spec_accept_length(self) -> float | None:
        """The ranks' cumulative accept lengths, averaged (None before speculation has run)."""
        values = [r.avg_spec_accept_length for r in self.ranks if r.avg_spec_accept_length is not None]
        return sum(values) / len(values) if values else None


def _positive(value: Any) -> int | None:
    number = int_or_none(value)
    return number if number is not None and number > 0 else None


def max_running_requests_of(facts: Mapping[str, Any]) -> int | None:
    """THE ``max_running_requests`` rule: the most requests one DP rank runs at once, which is what the knob's
    ceiling is compared with (``N >= it`` = always on) and what a sweep's "on" sets. SGLang's per-rank
    ``effective_max_running_requests_per_dp`` (below the server arg under DP attention) where a rank
    reports it, else the ranks' own ``max_running_requests``, else the top-level server arg."""
    states = facts.get("internal_states")
    ranks = [s for s in states if isinstance(s, Mapping)] if isinstance(states, list) else []
    for key in ("effective_max_running_requests_per_dp", "max_running_requests"):
        values = [v for v in (_positive(s.get(key)) for s in ranks) if v is not None]
        if values:
            return max(values)  # ranks agree in practice; the largest keeps "on" on for every rank
    return _positive(facts.get("max_running_requests"))


def _rank_record(index: int, state: Mapping[str, Any]) -> dict[str, Any]:
    """One flat record per rank: its own keys and its plugin block's keys side by side."""
    block = state.get("spectower")
    knob: Mapping[str, Any] = block if isinstance(block, Mapping) else {}
    dp_rank = int_or_none(state.get("dp_rank"))
    return {
        **{key: state.get(key) for key in _RANK_KEYS},
        **{key: knob.get(key) for key in _PLUGIN_KEYS},
        "dp_rank": index if dp_rank is None else dp_rank,
        "plugin": "spec_max_bs" in knob,
    }


def parse_server_info(doc: Any) -> ServerInfo:
    """Parse a decoded /server_info JSON document. Raises ServerInfoError (one line) for anything else."""
    if not isinstance(doc, dict):
        raise ServerInfoError(f"/server_info: expected a JSON object, got {type(doc).__name__}")
    # here, not at the top: storage.bench_serving loads the database layer, which a command that stops
    # before any /server_info (a refused argument, an unreachable server) never needs
    from ...storage.bench_serving import effective_server_info

    engine = effective_server_info(doc)
    if "internal_states" not in engine and "version" not in engine:
        raise ServerInfoError(
            "/server_info: neither 'version' nor 'internal_states' present (nor a PD router's decode workers)"
        )
    info = redact(doc)  # the document as it came (redacted) is what is kept
    facts: dict[str, Any] = info if engine is doc else redact(engine)
    return ServerInfo.model_validate(
        {
            **{name: facts.get(name) for name in ServerInfo.model_fields if name in facts},
            "max_running_requests": max_running_requests_of(facts),
            "startup_fingerprint": _fingerprint(facts),
            "ranks": _ranks(facts),
            "info": info,
            "info_hash": stable_server_info_hash(info),
        }
    )


def refresh_ranks(known: ServerInfo, doc: Any) -> ServerInfo | None:
    """``known`` with the ranks of a newer decoded /server_info of the same launch: what changes while a
    server runs (the knob, its owner and lock, the active tier, the accept length) without the whole
    document's redaction, hash and facts (0.5 ms of CPU for the simulator's 32 KB; this: 0.02 ms).
    ``info`` and ``info_hash`` stay those of ``known``'s full parse. None when ``doc`` is of another launch
    (its ``startup_time`` differs) or not a server_info this reads as one: then ``parse_server_info``
    decides."""
    if not isinstance(doc, dict):
        return None
    from ...storage.bench_serving import effective_server_info

    engine = effective_server_info(doc)
    if "internal_states" not in engine and "version" not in engine:
        return None
    if _fingerprint(engine) != known.startup_fingerprint:
        return None
    try:
        ranks = _ranks(engine)
    except ServerInfoError:
        return None
    return known.model_copy(update={"ranks": ranks})


def _fingerprint(facts: Mapping[str, Any]) -> str | None:
    """startup_time as canonical JSON: one value per launch (None: the server does not say)."""
    startup = facts.get("startup_time")
    return json.dumps(startup, sort_keys=True) if startup is not None else None


def _ranks(facts: Mapping[str, Any]) -> tuple[RankState, ...]:
    """The ranks of ``internal_states``; each rank's record is redacted on its own (its maps are the
    plugin's), so a document that was not redacted whole (``refresh_ranks``) keeps no secret either."""
    states = facts.get("internal_states")
    if states is not None and not isinstance(states, list):
        raise ServerInfoError("/server_info: 'internal_states' is not a list")
    ranks: list[RankState] = []
    for i, state in enumerate(states or []):
        if not isinstance(state, dict):
            raise ServerInfoError(f"/server_info: internal_states[{i}] is not an object")
        ranks.append(RankState.model_validate(redact(_rank_record(i, state))))
    return tuple(ranks)


def knob_values(info: ServerInfo) -> list[int | None]:
    """The knob as each rank reports it (None where a rank has no plugin)."""
    return [rank.spec_max_bs for rank in info.ranks]
