"""The gated-decode plugin on flashinfer (spectower.plugin.gated_decode), through SGLang's real
load_plugins(): a one-token TARGET_VERIFY on a ``FlashInferAttnBackend`` is planned and run as DECODE, eager
and in CUDA-graph capture and replay; a drafting verify and a prefill pass through.

Real: load_plugins() and entry-point discovery, HookRegistry, and SGLang's own ``FlashInferAttnBackend``
methods, unmodified: ``init_forward_metadata``, ``init_forward_metadata_out_graph`` (capture and replay),
``_prepare_cuda_graph_metadata``, ``_create_decode_wrappers`` / ``_create_prefill_wrappers``,
``forward_extend``, ``forward_decode``; ``ForwardMode``, ``ForwardBatch``, ``EagleVerifyInput`` (built as the
CUDA-graph runner's ``get_spec_info`` builds it). Constructed: the backend (``object.__new__`` plus the
attributes its ``__init__`` / ``init_cuda_graph_state`` would set, as CPU tensors), the batches, and what
launches kernels: flashinfer's names in SGLang's module (``BatchDecodeWithPagedKVCacheWrapper``,
``BatchPrefillWithPagedKVCacheWrapper``, ``fast_decode_plan``: flashinfer does not import on a CPU machine),
the two indices updaters (``update`` records its arguments, named by the real signature) and the KV pool.

Each case runs the eager planning and forward, then the capture and a replay, on a backend of its own.
Run with ``SPECTOWER_GATED_DECODE=0`` it shows the off switch. Prints one JSON object.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import sys
import types
from functools import partial
from typing import Any

import _harness

CALLS: list[dict[str, Any]] = []
BS = 2
SEQ_LENS = [5, 9]
HEADS, HEAD_DIM = 2, 4


def _tensor_list(value: Any) -> Any:
    return value.tolist() if hasattr(value, "tolist") else value


class Wrapper:
    """Stands in for one of flashinfer's wrapper classes: records what it ran (the updaters plan)."""

    kind = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.use_cuda_graph = bool(kwargs.get("use_cuda_graph", False))
        self.name = f"{self.kind}{'-graph' if self.use_cuda_graph else ''}"

    def forward(self, q: Any, kv_cache: Any, **kwargs: Any) -> Any:
        CALLS.append({"call": "attention", "wrapper": self.name, "q_shape": list(q.shape)})
        return q

    def forward_return_lse(self, q: Any, kv_cache: Any, **kwargs: Any) -> Any:
        raise AssertionError("ragged prefill is not expected here (use_paged)")


class DecodeWrapper(Wrapper):
    kind = "decode"


class PrefillWrapper(Wrapper):
    kind = "prefill"


def fast_decode_plan(wrapper: Any, *args: Any, **kwargs: Any) -> None:
    """flashinfer's replay-time planner, installed on the captured decode wrappers (called by the updater)."""


class Updater:
    """An indices updater whose ``update`` records what it was asked to plan (named by the real signature)."""

    def __init__(self, name: str, real_update: Any) -> None:
        self.name = name
        self.signature = inspect.signature(real_update)

    def update(self, *args: Any, **kwargs: Any) -> None:
        bound = self.signature.bind(None, *args, **kwargs).arguments
        wrappers = bound.get("decode_wrappers", bound.get("prefill_wrappers")) or []
        spec_info = bound.get("spec_info")
        CALLS.append({
            "call": "update", "updater": self.name, "seq_lens": _tensor_list(bound["seq_lens"]),
            "seq_lens_cpu": _tensor_list(bound.get("seq_lens_cpu")),
            "seq_lens_sum": bound["seq_lens_sum"], "wrappers": [w.name for w in wrappers],
            "wrapper_ids": [id(w) for w in wrappers],
            "spec_info": type(spec_info).__name__ if spec_info is not None else None,
        })  # fmt: skip


class KVPool:
    def __init__(self, torch: Any) -> None:
        self.buffer = torch.zeros(64, HEADS, HEAD_DIM)

    def get_kv_buffer(self, layer_id: int) -> Any:
        return self.buffer, self.buffer

    def set_kv_buffer(self, layer: Any, loc: Any, k: Any, v: Any, *scales: Any) -> None:
        loc = getattr(loc, "loc", loc)
        CALLS.append({"call": "kv_write", "loc": _tensor_list(loc)})


def stub_flashinfer(module: Any) -> None:
    """flashinfer's names, as SGLang's module binds them when flashinfer imports (it does not here)."""
    module.BatchDecodeWithPagedKVCacheWrapper = DecodeWrapper
    module.BatchPrefillWithPagedKVCacheWrapper = PrefillWrapper
    module.BatchPrefillWithRaggedKVCacheWrapper = PrefillWrapper
    module.fast_decode_plan = fast_decode_plan


def make_backend(cls: Any, module: Any, *, dequant: bool = False) -> Any:
    """A FlashInferAttnBackend with the attributes ``__init__`` and ``init_cuda_graph_state`` set (CPU)."""
    import torch

    max_bs, max_context = 8, 32
    b = object.__new__(cls)
    plain = {
        "num_wrappers": 1, "dispatch_reason": None, "skip_prefill": False,
        "use_sliding_window_kv_pool": False, "_swa_kv_pool": None, "kv_index_translator": None,
        "decode_split_tile_size": None, "prefill_split_tile_size": None, "disable_cuda_graph_kv_split": False,
        "is_multimodal": False, "enable_mis": False, "enable_deterministic": False, "use_paged": True,
        "prefill_uses_dequant_workspace": False, "decode_uses_dequant_workspace": dequant,
        "dq_page_table": None, "dq_paged_kernel_lens": None, "cpu_req_pool_indices": None,
        "is_dllm_model": False, "dllm_config": None, "prefill_backend": "fa2", "decode_backend": "fa2",
        "decode_use_tensor_cores": True, "flashinfer_kv_cache_dtype": torch.bfloat16,
        "max_context_len": max_context, "page_size": 1, "forward_metadata": None,
        "kv_cache_quant_method": types.SimpleNamespace(needs_global_scale=lambda: False),
        "token_to_kv_pool": KVPool(torch), "workspace_buffer": torch.empty(16, dtype=torch.uint8),
        "req_to_token_pool": types.SimpleNamespace(req_to_token=torch.zeros(max_bs, max_context)),
        # __init__
        "kv_indptr": [torch.zeros(max_bs + 1, dtype=torch.int32)],
        "kv_last_page_len": torch.ones(max_bs, dtype=torch.int32),
        "qo_indptr": [torch.zeros(max_bs + 1, dtype=torch.int32)],
        "decode_wrappers": [DecodeWrapper()], "prefill_wrappers_paged": [PrefillWrapper()],
        "prefill_wrappers_verify": [PrefillWrapper()], "prefill_wrapper_ragged": PrefillWrapper(),
        "decode_cuda_graph_metadata": {}, "prefill_cuda_graph_metadata": {},
        "draft_extend_cuda_graph_metadata": {}, "full_cg_prefill_wrappers": None,
        # init_cuda_graph_state (device="cuda" there)
        "cuda_graph_kv_indices": [torch.zeros(max_bs * 4 * max_context, dtype=torch.int32)],
        "cuda_graph_swa_out_cache_loc": None,
        "cuda_graph_custom_mask": torch.zeros(max_bs * 4 * max_context, dtype=torch.uint8),
    }  # fmt: skip
    for name, value in plain.items():
        setattr(b, name, value)
    b.cuda_graph_qk_indptr = [x.clone() for x in b.kv_indptr]
    b.cuda_graph_qo_indptr = [x.clone() for x in b.kv_indptr]
    b.indices_updater_decode = Updater("decode", module.FlashInferIndicesUpdaterDecode.update)
    b.indices_updater_prefill = Updater("prefill", module.FlashInferIndicesUpdaterPrefill.update)
    return b


def verify_input(width: int) -> Any:
    """An EagleVerifyInput as the decode CUDA-graph runner's ``get_spec_info`` builds it (width = the state's
    ``speculative_num_draft_tokens``; the worker's trivial 0-step verify carries 1 too)."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    return EagleVerifyInput(
        draft_token=None, custom_mask=torch.ones(64, dtype=torch.bool), positions=None, retrieve_index=None,
        retrieve_next_token=None, retrieve_next_sibling=None, retrieve_cum_len=None,
        spec_steps=max(width - 1, 0), topk=1, draft_token_num=width,
        capture_hidden_mode=CaptureHiddenMode.FULL, seq_lens_sum=None, seq_lens_cpu=None,
    )  # fmt: skip


def make_batch(mode: Any, width: int) -> Any:
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    tokens = BS * width
    fb = object.__new__(ForwardBatch)
    fields = {
        "forward_mode": mode, "batch_size": BS, "req_pool_indices": torch.tensor([1, 2]),
        "seq_lens": torch.tensor(SEQ_LENS), "seq_lens_cpu": torch.tensor(SEQ_LENS),
        "seq_lens_sum": sum(SEQ_LENS),
        "positions": torch.arange(tokens), "out_cache_loc": torch.arange(40, 40 + tokens),
        "encoder_lens": None, "encoder_out_cache_loc": None, "kv_loc_plan": None,
        "extend_prefix_lens": torch.tensor(SEQ_LENS) - width,
        "extend_prefix_lens_cpu": [s - width for s in SEQ_LENS],
        "extend_seq_lens_cpu": [width] * BS, "cross_attention_custom_mask": None,
        "spec_info": verify_input(width) if mode == ForwardMode.TARGET_VERIFY else None,
    }  # fmt: skip
    for name, value in fields.items():
        setattr(fb, name, value)
    return fb


def replay_view(fb: Any, width: int) -> Any:
    """A later step's batch as the decode CUDA-graph runner's ``build_replay_fb_view`` hands it to the backend
    (a SimpleNamespace: the capture's forward mode, the live spec info): one real request (7 tokens) padded to
    the captured batch size with the backend's fill value (``get_cuda_graph_seq_len_fill_value``, 1)."""
    import torch

    return types.SimpleNamespace(
        batch_size=BS, forward_mode=fb.forward_mode, actual_forward_mode=fb.forward_mode,
        positions=fb.positions, req_pool_indices=torch.tensor([3, 0]), seq_lens=torch.tensor([7, 1]),
        seq_lens_cpu=torch.tensor([7, 1]), seq_lens_sum=8, encoder_lens=None, out_cache_loc=fb.out_cache_loc,
        kv_loc_plan=None, spec_info=verify_input(width), num_padding=1,
    )  # fmt: skip


ALL_PHASES = ("eager", "capture", "replay")


def run_case(backend: Any, mode: Any, width: int, phases: tuple[str, ...] = ALL_PHASES) -> dict[str, Any]:
    """Eager: plan, then one layer's attention. Graph: capture (plan, then the layer), a replay's plan."""
    import torch

    layer = types.SimpleNamespace(
        layer_id=0, tp_q_head_num=HEADS, tp_k_head_num=HEADS, tp_v_head_num=HEADS, head_dim=HEAD_DIM,
        logit_cap=0.0, scaling=1.0, k_scale_float=1.0, v_scale_float=1.0, k_scale=None, v_scale=None,
        is_cross_attention=False, attn_type=None, sliding_window_size=-1,
    )  # fmt: skip
    tokens = BS * width
    q = torch.zeros(tokens, HEADS * HEAD_DIM)
    kv = torch.zeros(tokens, HEADS, HEAD_DIM)
    fb = make_batch(mode, width)
    out: dict[str, Any] = {}
    for phase in phases:
        CALLS.clear()
        if phase == "eager":
            backend.init_forward_metadata(fb)
        elif phase == "capture":
            backend.init_forward_metadata_out_graph(fb, in_capture=True)
        else:
            backend.init_forward_metadata_out_graph(replay_view(fb, width))
        metadata = type(backend.forward_metadata).__name__
        if phase != "replay":
            o = backend.forward_extend(q, kv, kv, layer, fb, True)
            CALLS.append({"call": "returned", "shape": list(o.shape)})
        out[phase] = {"calls": list(CALLS), "metadata": metadata}
    out["graph_wrappers"] = {
        "decode": {bs: [w.name for w in ws] for bs, ws in backend.decode_cuda_graph_metadata.items()},
        "prefill": {bs: [w.name for w in ws] for bs, ws in backend.prefill_cuda_graph_metadata.items()},
        "decode_ids": {bs: [id(w) for w in ws] for bs, ws in backend.decode_cuda_graph_metadata.items()},
        "decode_fast_plan": [
            isinstance(w.begin_forward, partial) and w.begin_forward.func is fast_decode_plan
            for ws in backend.decode_cuda_graph_metadata.values() for w in ws
        ],
    }  # fmt: skip
    spec_info = type(fb.spec_info).__name__
    out["batch_after"] = {"mode": fb.forward_mode.name, "seq_lens": fb.seq_lens.tolist(),
                          "seq_lens_sum": fb.seq_lens_sum, "spec_info": spec_info}  # fmt: skip
    return out


def main() -> None:
    from sglang.srt.layers.attention import flashinfer_backend as module
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.plugins.hook_registry import HookRegistry

    stub_flashinfer(module)
    printed = io.StringIO()
    with contextlib.redirect_stderr(printed):  # the plugin prints what it hooked (SGLang's logging is not up)
        _harness.load_plugin()
    sys.stderr.write(printed.getvalue())
    cls = module.FlashInferAttnBackend
    targets = {
        name: [src.plugin_name if src else None for _ht, _h, src in
               HookRegistry._hooks.get(f"{module.__name__}.FlashInferAttnBackend.{name}", [])]
        for name in ("init_forward_metadata", "init_forward_metadata_out_graph", "forward_extend")
    }  # fmt: skip
    cases = {
        "gated_verify": run_case(make_backend(cls, module), ForwardMode.TARGET_VERIFY, 1),
        "drafting_verify": run_case(make_backend(cls, module), ForwardMode.TARGET_VERIFY, 4),
        "gated_verify_fp4_dequant": run_case(
            make_backend(cls, module, dequant=True), ForwardMode.TARGET_VERIFY, 1
        ),
    }
    # a prefill on the 0-step state's backend: eager only (a full prefill graph is another runner's)
    cases["prefill"] = run_case(make_backend(cls, module), ForwardMode.EXTEND, 3, phases=("eager",))
    logged = [line for line in printed.getvalue().splitlines() if line.startswith("spectower gated decode")]
    _harness.emit({"targets": targets, "cases": cases, "logged": logged})


if __name__ == "__main__":
    main()
