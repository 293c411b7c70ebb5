"""Shared set-up for the plugin checks, which run INSIDE the SGLang 0.5.23 venv (tests/sglang_env.sh).

What is real and what is constructed:

- REAL (SGLang 0.5.23's own code, unmodified): ``load_plugins()`` and its entry-point discovery (the plugin
  is found through a ``.dist-info/entry_points.txt`` that the pytest side puts on ``PYTHONPATH`` beside the
  checkout), ``HookRegistry``, the runtime context (``get_context()``, published with SGLang's own test hook
  ``override_server_args(...).install()``, then ``override()`` and ``overrides_log()``), ``Scheduler``'s
  ``set_internal_state`` / ``get_internal_state`` methods, ``SchedulerInternalStateController`` (its handlers,
  validation and readback), ``SetInternalStateReq`` / ``GetInternalStateReq``, ``AdaptiveSpeculativeParams``
  (loading the adaptive config file), ``AdaptiveStepSlot`` (the EMA), ``AdaptiveController``, and
  ``EAGLEWorkerV2.apply_runtime_state`` (the method that appends to the override log on every step switch).
- CONSTRUCTED: the ``Scheduler`` object (``object.__new__(Scheduler)`` plus the plain attributes those
  methods read: ``server_args``, ``max_running_requests``, ``spec_algorithm``, a metrics reporter, memory
  figures, ``internal_state``), and the ``EAGLEWorkerV2`` object (``object.__new__`` plus stand-in draft and
  target workers holding the attributes ``apply_runtime_state`` assigns). ``SpecRuntimeState`` objects carry
  no attention backends or CUDA graphs (there is no GPU); switching between them is otherwise SGLang's path.

The same harness also runs against SGLang 0.5.17's classes (its differences: no
SchedulerInternalStateController, AdaptiveController builds its own params) when a 0.5.17 package is put
first on PYTHONPATH; CI runs 0.5.23 only.

Each check prints ONE JSON object on its last stdout line; SGLang's logging goes to stderr.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import types
from typing import Any

N_STEPS = 3  # the working step of the generated config used by the checks


class FakeClock:
    """A clock the check advances itself (the plugin's counters, loop stalls and windows keep time by one), so
    a check's figures never depend on how loaded the machine running it is."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class LogCapture(logging.Handler):
    """Keeps every record so a check can assert on what the plugin logged."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(
        self, name_prefix: str = "spectower.plugin.knob_gate", level: int = logging.INFO
    ) -> list[str]:
        return [r.getMessage() for r in self.records if r.name.startswith(name_prefix) and r.levelno >= level]


def capture_logs() -> LogCapture:
    handler = LogCapture()
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def publish_context(config_path: str | None, *, adaptive: bool = True, max_running_requests: int = 48) -> Any:
    """Publish a runtime context the way SGLang's own tests do; returns the published ServerArgs."""
    from sglang.srt.runtime_context import get_context

    fields: dict[str, Any] = {
        "speculative_algorithm": "EAGLE3",
        "speculative_eagle_topk": 1,
        "speculative_num_steps": N_STEPS,
        "speculative_num_draft_tokens": N_STEPS + 1,
        "speculative_adaptive": adaptive,
        "max_running_requests": max_running_requests,
    }
    if config_path is not None:
        fields["speculative_adaptive_config"] = config_path
    return get_context().override_server_args(**fields).install()


def make_scheduler(server_args: Any, max_running_requests: int = 48) -> Any:
    """A Scheduler built without __init__: only the attributes the internal-state methods read."""
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    scheduler = object.__new__(Scheduler)
    scheduler.server_args = server_args
    scheduler.max_running_requests = max_running_requests
    scheduler.spec_algorithm = SpeculativeAlgorithm.from_string("EAGLE3")
    scheduler.metrics_reporter = types.SimpleNamespace(
        last_gen_throughput=0.0,
        spec_total_num_accept_tokens=0,
        spec_total_num_forward_ct=0,
        step_time_dict={},
    )
    scheduler.draft_worker = None
    scheduler.tp_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(weight_load_mem_usage=1.0), graph_memory_usage={}
    )
    kvcache = types.SimpleNamespace(mem_usage=2.0)
    scheduler.token_to_kv_pool_allocator = types.SimpleNamespace(get_kvcache=lambda: kvcache)
    scheduler.startup_available_gpu_memory_gb = 100.0
    scheduler.max_total_num_tokens = 4096
    scheduler.swa_tokens_per_layer = None
    scheduler.startup_time = 0.0
    scheduler.rust_server = None
    scheduler.disaggregation_mode = None
    try:  # 0.5.23 delegates both methods to this controller; 0.5.17 keeps them inline in Scheduler
        from sglang.srt.managers.scheduler_components.internal_state import SchedulerInternalStateController
    except ImportError:
        scheduler.ps = types.SimpleNamespace(pp_size=1)  # 0.5.17's inline pp_max_micro_batch_size check
    else:
        scheduler.internal_state = SchedulerInternalStateController(
            scheduler=scheduler, record_step_time=False
        )
    return scheduler


def set_state(scheduler: Any, server_args: dict[str, Any]) -> bool:
    from sglang.srt.managers.io_struct import SetInternalStateReq

    return bool(scheduler.set_internal_state(SetInternalStateReq(server_args=server_args)).updated)


def get_state(scheduler: Any) -> dict[str, Any]:
    from sglang.srt.managers.io_struct import GetInternalStateReq

    return dict(scheduler.get_internal_state(GetInternalStateReq()).internal_state)


def make_controller(config_path: str) -> tuple[Any, Any, Any]:
    """(controller, params, worker): the real AdaptiveController over the real AdaptiveSpeculativeParams,
    switching a constructed EAGLEWorkerV2 through its real apply_runtime_state."""
    from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController, SpecRuntimeState
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    worker = object.__new__(EAGLEWorkerV2)
    worker.speculative_num_steps = N_STEPS
    worker.speculative_num_draft_tokens = N_STEPS + 1
    worker._draft_worker = types.SimpleNamespace(
        speculative_num_steps=N_STEPS,
        speculative_num_draft_tokens=N_STEPS + 1,
        draft_runner=types.SimpleNamespace(draft_attn_backend=None, attn_backend=None),
        _rebuild_topk1_chain_buffers=lambda: None,
    )
    worker._target_worker = types.SimpleNamespace(
        model_runner=types.SimpleNamespace(attn_backend=None, decode_cuda_graph_runner=None)
    )
    if "policy" in inspect.signature(AdaptiveController).parameters:  # 0.5.23: the policy is injected
        params = AdaptiveSpeculativeParams(initial_steps=N_STEPS, cfg_path=config_path)
        controller = AdaptiveController(worker, params)
    else:  # 0.5.17: the controller builds its AdaptiveSpeculativeParams from the config path
        controller = AdaptiveController(worker, config_path)
        params = controller.params
    for steps in params.candidate_steps:
        controller.register(
            SpecRuntimeState(
                speculative_num_steps=steps,
                speculative_num_draft_tokens=steps + 1,
                draft_attn_backend=None,
                cuda_graph_runner=None,
                target_attn_backend=None,
                target_graph_runner=None,
                draft_extend_attn_backend=None,
                cuda_graph_runner_for_draft_extend=None,
            )
        )
    controller.init_states(None)
    return controller, params, worker


def start_scheduler(config_path: str) -> tuple[Any, Any]:
    """(plugin, scheduler): SGLang's load_plugins() run (``load_plugin``), then the config's server args
    published and a Scheduler over them (``make_scheduler``): where every check of the knob starts."""
    plugin = load_plugin()
    return plugin, make_scheduler(publish_context(config_path))


def start_decoding(config_path: str) -> tuple[Any, Any, Any, Any, Any]:
    """(plugin, scheduler, controller, params, worker): ``start_scheduler``, then ``make_controller``: the
    checks that drive decode steps through the adaptive controller."""
    plugin, scheduler = start_scheduler(config_path)
    return (plugin, scheduler, *make_controller(config_path))


def make_decode_worker(config_path: str) -> tuple[Any, Any]:
    """(scheduler, worker) for a decode step's checks: ``make_scheduler``'s Scheduler, and
    ``make_controller``'s EAGLEWorkerV2 with an ``EagleDraftWorker`` object as its draft worker and the
    real AdaptiveController attached, so the plugins' worker hooks see SGLang's classes."""
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

    scheduler = make_scheduler(publish_context(config_path))
    controller, _params, worker = make_controller(config_path)
    draft = object.__new__(EagleDraftWorker)
    for name, value in vars(worker._draft_worker).items():
        setattr(draft, name, value)
    worker._draft_worker = draft
    worker.adaptive_controller = controller
    return scheduler, worker


def load_plugin() -> Any:
    """Run SGLang's real load_plugins() and return the plugin module it loaded through the entry point."""
    from sglang.srt.plugins import load_plugins

    load_plugins()
    return sys.modules.get("spectower.plugin.knob_gate")


def emit(result: dict[str, Any]) -> None:
    from sglang.version import __version__

    result = {**result, "sglang_version": __version__}
    sys.stdout.write(json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
