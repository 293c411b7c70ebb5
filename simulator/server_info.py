"""``/server_info`` and ``/model_info`` bodies: SGLang's resolved args with the profile's facts and the
live per-rank state (the knob's read-back included).

``internal_states[i]`` holds the scheduler's copy of the args with runtime overrides applied, so its
``speculative_num_steps`` is the *active* value (0 while the last decode batch was gated), plus
``avg_spec_accept_length`` (absent until a decode step ran), ``last_gen_throughput``, ``memory_usage`` and
``spectower = {"plugin_version", "spec_max_bs", "batches_drafted", "batches_gated", "counters", "explore",
...}`` (docs/design.md; ``counters``: plugin/engine_counters.py, from the simulator's modelled step times;
``explore``: the exploration share and the batches it ran the other way, shaped as the plugin's).

The server reports ``speculative_adaptive: true`` and an adaptive config whose every band allows step 0
and the working step (what ``spectower sglang-config`` generates); the config is also written to the file
named by ``speculative_adaptive_config`` so a client on the same host can read it.
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

# the simulator reports the version of the plugin it stands in for
from ..plugin import gc_pauses, launcher_state
from ..plugin.gate import PLUGIN_VERSION
from . import knob_state
from .config import SGLANG_VERSION, SimConfig
from .engine import Engine, RankScheduler
from .server_args import internal_only_template, server_args_template

ADAPTIVE_BANDS = (1, 8, 32, 64)
# How long the emulated server took to start, by phase, as /server_info reports it (simulator.metrics' startup
# gauges report the same numbers).
STARTUP_TIME: dict[str, Any] = {
    "load_weight": 41.3,
    "kv_cache_allocation": 2.4,
    "scheduler_e2e": 96.0,
    "cuda_graph": {
        "prefill": 6.1,
        "decode": 0.0,
        "target_verify": 4.2,
        "draft_prefill": 2.3,
        "draft_decode": 2.0,
        "draft_extend": 3.4,
    },
    "tokenizer_e2e": 118.5,
}

# What a generative (non-embedding) model reports under /model_info "embedding" (0.5.17 capture), but for
# its "bcg" block: embedding_info() takes that from the server args.
EMBEDDING_INFO: dict[str, Any] = {
    "family": "none",
    "task": "none",
    "execution": "none",
    "attention": "none",
    "pooling": "model_defined",
    "normalize": False,
    "postprocessor": "none",
    "tokenizer_special_tokens": "model_default",
    "supports_dimensions": False,
    "supports_token_embeddings": False,
    "supports_multimodal": False,
    "requires_embedding_flag": False,
    "auto_enable_embedding": False,
    "bcg_eligibility": "disabled",
    "safe_disable_kv_cache": False,
    "safe_disable_radix_cache": False,
    "safe_disable_chunked_prefill": False,
    "enabled": False,
    "matryoshka_dimensions": [],
}


def embedding_info(args: dict[str, Any]) -> dict[str, Any]:
    """/model_info's "embedding": its breakable-CUDA-graph block ("bcg") is the prefill graph config of the
    server args (``cuda_graph_config.prefill``: in the 0.5.17 capture the same backend, token budget and
    batch sizes), so the two bodies cannot disagree."""
    prefill = args["cuda_graph_config"]["prefill"]
    return {
        **copy.deepcopy(EMBEDDING_INFO),
        "bcg": {
            "prefill_backend": prefill["backend"],
            "enabled": True,
            "capture_token_budget": prefill["max_bs"],
            "capture_batch_sizes": list(prefill["bs"]),
        },
        "cache": {
            "kv_cache_disabled": False,
            "radix_cache_disabled": False,
            "chunked_prefill_disabled": False,
        },
    }


# What SGLang reports for a server launched without --speculative-algorithm.
PLAIN_SPECULATIVE_ARGS: dict[str, Any] = {
    "speculative_algorithm": None,
    "speculative_draft_model_path": None,
    "speculative_draft_model_revision": None,
    "speculative_num_steps": None,
    "speculative_eagle_topk": None,
    "speculative_num_draft_tokens": None,
    "speculative_adaptive": False,
    "speculative_adaptive_config": None,
}


def adaptive_config(steps: int) -> dict[str, dict[str, list[int]]]:
    """Every band allows 0 (gated) and the working step: what the spectower gate needs."""
    return {str(band): {"candidate_steps": [0, steps]} for band in ADAPTIVE_BANDS}


def _process_gc() -> gc_pauses.GcPauses:
    """This process's collections, as the plugin times its scheduler's (``gc`` in the plugin's state) and its
    launcher's (``launcher``): the simulator is one Python process that is both, so both blocks are real and
    read one timer, installed once on the first report (plugin/launcher_state.py's)."""
    return launcher_state.pauses()


class ServerInfo:
    def __init__(self, config: SimConfig, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.overrides: dict[str, int | float] = {}
        profile = config.profile
        steps = profile.speculative_num_steps
        self.adaptive_config = adaptive_config(steps)
        self._config_dir = tempfile.TemporaryDirectory(prefix="spectower-sim-")
        self.adaptive_config_path = Path(self._config_dir.name) / "adaptive.json"
        self.adaptive_config_path.write_text(json.dumps(self.adaptive_config))
        args = server_args_template()
        model_path = str(profile.raw.get("model_path") or profile.served_model_name)
        launch = [sys.executable, "-m", "spectower.simulator", "--profile", profile.name,
                  "--port", str(config.port)]
        args.update(
            {
                "model_path": model_path,
                "tokenizer_path": model_path,
                "load_format": "auto",
                "served_model_name": profile.served_model_name,
                "host": config.host,
                "port": config.port,
                "random_seed": config.seed,
                "tp_size": profile.gpus.count,
                "dp_size": config.dp_size,
                "max_running_requests": config.effective_max_running_requests,
                "mem_fraction_static": 0.87,
                "enable_metrics": True,
                "decode_log_interval": config.decode_log_interval,
                "speculative_algorithm": str(profile.raw.get("speculative_algorithm") or "EAGLE3"),
                "speculative_draft_model_path": f"{model_path}-eagle3",
                "speculative_num_steps": steps,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": steps + 1,
                "speculative_adaptive": True,
                "speculative_adaptive_config": str(self.adaptive_config_path),
                # Secrets are never echoed: SGLang prints them, the simulator does not.
                "api_key": None,
                "admin_api_key": None,
                "launch_command": " ".join(launch),
                "frontend": "simulator",
            }
        )
        if not profile.speculative:
            # A server launched without speculation: SGLang's defaults, and no spectower plugin state.
            args.update(PLAIN_SPECULATIVE_ARGS)
            launch.append("--no-speculation")
            args["launch_command"] = " ".join(launch)
        self.args = args

    def close(self) -> None:
        self._config_dir.cleanup()

    def _internal_state(self, rank: RankScheduler) -> dict[str, Any]:
        engine = self.engine
        state = dict(self.args)
        state.pop("custom_sigquit_handler", None)
        state.update(self.overrides)
        state.update(internal_only_template())
        speculative = self.config.profile.speculative
        state["max_speculative_num_draft_tokens"] = self.args["speculative_num_draft_tokens"]
        state["speculative_num_steps"] = rank.active_steps if speculative else None
        state["speculative_num_draft_tokens"] = rank.active_steps + 1 if speculative else None
        mem = engine.memory
        state["last_gen_throughput"] = rank.last_gen_throughput
        state["memory_usage"] = {
            "weight": mem.weight_gb,
            "kvcache": mem.kv_cache_gb,
            "startup_available": mem.startup_available_gb,
            "token_capacity": mem.max_total_num_tokens,
            "token_capacity_swa": None,
            "graph": {
                "prefill": mem.graph_gb / 2,
                "decode": 0.0,
                "target_verify": mem.graph_gb / 4,
                "draft_prefill": mem.graph_gb / 8,
                "draft_decode": mem.graph_gb / 16,
                "draft_extend": mem.graph_gb / 16,
            },
        }
        state["startup_time"] = STARTUP_TIME
        state["effective_max_running_requests_per_dp"] = engine.max_running_requests
        avg = rank.avg_spec_accept_length
        if not speculative:
            return state  # no drafting, no spectower plugin: no accept length, no knob
        if avg is not None:
            state["avg_spec_accept_length"] = avg
        state["spectower"] = {
            "plugin_version": PLUGIN_VERSION,
            "spec_max_bs": rank.spec_max_bs,
            "batches_drafted": rank.batches_drafted,
            "batches_gated": rank.batches_gated,
            "counters": rank.counters.snapshot(),
            "explore": knob_state.explore_report(engine, rank),
            "gc": _process_gc().report(),
            "loop": rank.stalls.report(),
            "gated_decode": rank.holes.report(),
            **knob_state.report(engine),
        }
        return state

    def server_info(self) -> dict[str, Any]:
        info = dict(self.args)
        info.update(self.overrides)
        engine = self.engine
        info.update(
            {
                "status": "ready" if engine.ready else "starting",
                "max_total_num_tokens": engine.memory.max_total_num_tokens,
                "max_req_input_len": 131072 - 6,
                "startup_time": STARTUP_TIME,
                # each rank's plugin block gets the launcher's, as the plugin adds it in SGLang's launcher
                "internal_states": launcher_state.add_to([self._internal_state(r) for r in engine.ranks]),
                "version": SGLANG_VERSION,
                "kv_events": None,
            }
        )
        return info

    def model_info(self) -> dict[str, Any]:
        path = self.args["model_path"]
        llama = "llama" in self.config.profile.served_model_name.lower()
        arch = self.config.profile.raw.get("architectures") or (
            ["LlamaForCausalLM"] if llama else ["GlmMoeDsaForCausalLM"]
        )
        model_type = self.config.profile.raw.get("model_type") or ("llama" if llama else "glm_moe_dsa")
        return {
            "model_path": path,
            "tokenizer_path": path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": str(model_type),
            "architectures": list(arch),
            "served_model_name": self.config.profile.served_model_name,
            "embedding": embedding_info(self.args),
        }
