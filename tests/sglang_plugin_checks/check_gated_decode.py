"""The gated-decode plugin (spectower.control.sglang_gated_decode) through SGLang's real load_plugins():
a one-token TARGET_VERIFY on the 0-step backend is planned and run as DECODE; everything else passes.

Real: load_plugins() and entry-point discovery, HookRegistry, ``TritonAttnBackend`` (the class whose
methods are hooked), ``ForwardMode``, ``ForwardBatch``, ``EagleVerifyInput``. Constructed: the backend and
batch objects (``object.__new__`` plus the attributes the hooks read), and the four method BODIES, which
plan and launch GPU kernels: they are replaced by recorders before the plugin loads, so the hooks wrap them
exactly as they would wrap SGLang's. Run with ``SPECTOWER_GATED_DECODE=0`` it shows the off switch.
Prints one JSON object.
"""

from __future__ import annotations

from typing import Any

import _harness

CALLS: list[dict[str, Any]] = []


def _seen(name: str, forward_batch: Any, **extra: Any) -> dict[str, Any]:
    return {
        "method": name,
        "mode": forward_batch.forward_mode.name,
        "seq_lens": forward_batch.seq_lens.tolist(),
        "seq_lens_sum": forward_batch.seq_lens_sum,
        "seq_lens_cpu": forward_batch.seq_lens_cpu.tolist(),
        "spec_info": type(forward_batch.spec_info).__name__ if forward_batch.spec_info is not None else None,
        **extra,
    }


def install_recorders(cls: Any) -> None:
    def init_forward_metadata(self: Any, forward_batch: Any) -> None:
        CALLS.append(_seen("init_forward_metadata", forward_batch))

    def init_forward_metadata_out_graph(self: Any, forward_batch: Any, in_capture: bool = False) -> None:
        CALLS.append(_seen("init_forward_metadata_out_graph", forward_batch, in_capture=in_capture))

    def forward_extend(self: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any,
                       save_kv_cache: bool = True, **kwargs: Any) -> str:  # fmt: skip
        CALLS.append(_seen("forward_extend", forward_batch, save_kv_cache=save_kv_cache))
        return "extend"

    def forward_decode(self: Any, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any,
                       save_kv_cache: bool = True, **kwargs: Any) -> str:  # fmt: skip
        CALLS.append(_seen("forward_decode", forward_batch, save_kv_cache=save_kv_cache))
        return "decode"

    for fn in (init_forward_metadata, init_forward_metadata_out_graph, forward_extend, forward_decode):
        setattr(cls, fn.__name__, fn)


def main() -> None:
    import torch
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    install_recorders(TritonAttnBackend)
    _harness.load_plugin()
    targets = {
        name: [src.plugin_name if src else None for _ht, _h, src in
               HookRegistry._hooks.get(f"{TritonAttnBackend.__module__}.TritonAttnBackend.{name}", [])]
        for name in ("init_forward_metadata", "init_forward_metadata_out_graph", "forward_extend")
    }  # fmt: skip

    def backend(draft_tokens: int) -> Any:
        b = object.__new__(TritonAttnBackend)
        b.num_draft_tokens = draft_tokens
        return b

    def batch(mode: Any, draft_tokens: int = 1) -> Any:
        fb = object.__new__(ForwardBatch)
        fb.forward_mode = mode
        fb.seq_lens = torch.tensor([5, 9])
        fb.seq_lens_sum = 14
        fb.seq_lens_cpu = torch.tensor([5, 9])
        verify = object.__new__(EagleVerifyInput)
        verify.draft_token_num = draft_tokens
        fb.spec_info = verify if mode == ForwardMode.TARGET_VERIFY else None
        return fb

    def run(b: Any, fb: Any) -> dict[str, Any]:
        CALLS.clear()
        b.init_forward_metadata(fb)
        b.init_forward_metadata_out_graph(fb, in_capture=True)
        out = b.forward_extend("q", "k", "v", "layer", fb, False)
        return {"calls": list(CALLS), "returned": out, "batch_after": _seen("caller", fb)}

    cases = {
        "gated_verify": run(backend(1), batch(ForwardMode.TARGET_VERIFY, 1)),
        "drafting_verify": run(backend(4), batch(ForwardMode.TARGET_VERIFY, 4)),
        "draft_extend_on_gated_backend": run(backend(1), batch(ForwardMode.DRAFT_EXTEND_V2)),
        "prefill_on_gated_backend": run(backend(1), batch(ForwardMode.EXTEND)),
    }
    _harness.emit({"targets": targets, "cases": cases})


if __name__ == "__main__":
    main()
