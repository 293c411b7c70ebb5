"""Off means off: a gated batch's one-token verify runs SGLang's decode attention, as a plain server's does.

Runs INSIDE SGLang (its own entry point in the ``sglang.srt.plugins`` group, beside the knob plugin), so it
imports only the standard library and, lazily, sglang.

Why. When the knob gates a batch (``spectower_spec_max_bs`` below the batch size), SGLang's EAGLE v2 worker
runs it at 0 draft steps: ``EAGLEWorkerV2._build_trivial_verify_input`` makes a TARGET_VERIFY of ONE token
per request with an all-visible mask, which is a decode step in all but name. The triton backend serves
every TARGET_VERIFY with its extend/verify kernel (``_fwd_kernel``), built for several query tokens per
request: measured on an H200 with the 8B-shaped pair, 15.4 ms of a 20.7 ms gated step at batch 64 against
0.7 ms of attention in a plain server's 5.6 ms decode step (gpu/README.md, "Where a gated step's time
goes"). So under load "off" served 0.51-0.67 of a plain server.

What. For the attention backend SGLang builds for the adaptive 0-step state (``num_draft_tokens == 1``),
a TARGET_VERIFY batch whose verify is one token per request is presented to the backend as DECODE:

- ``init_forward_metadata`` / ``init_forward_metadata_out_graph`` (eager, CUDA-graph capture and replay)
  get a view of the batch with ``forward_mode`` DECODE, no spec info, and ``seq_lens + 1``: the verify
  token's KV slot is already in ``req_to_token`` at position ``seq_len`` (``eagle_prepare_for_verify``
  assigned it), and a decode batch's lengths count its new token;
- ``forward_extend`` on such a batch runs ``forward_decode`` (same KV write to ``out_cache_loc``, then
  the decode kernel over ``seq_len + 1`` entries).

The rest of the verify path (logits, the one-node acceptance, the bonus token, the draft's KV extend) is
SGLang's own, unchanged; the CUDA graphs captured for the 0-step state hold decode kernels. Backends built
for drafting states (``num_draft_tokens > 1``), the draft model's backends (other forward modes) and every
other attention backend are untouched. ``SPECTOWER_GATED_DECODE=0`` in SGLang's environment turns it off.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

DISABLE_ENV = "SPECTOWER_GATED_DECODE"
TRITON_BACKEND = ("sglang.srt.layers.attention.triton_backend", "TritonAttnBackend")


def is_one_token_verify(backend: Any, forward_batch: Any) -> bool:
    """A TARGET_VERIFY of one token per request, on the backend of the 0-step runtime state."""
    if getattr(backend, "num_draft_tokens", None) != 1:
        return False
    mode = getattr(forward_batch, "forward_mode", None)
    if mode is None or not mode.is_target_verify():
        return False
    return getattr(getattr(forward_batch, "spec_info", None), "draft_token_num", 1) == 1


def as_decode(forward_batch: Any) -> Any:
    """A shallow view of the verify batch that the backend plans as a decode batch (see the module doc)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    view = copy.copy(forward_batch)
    view.forward_mode = ForwardMode.DECODE
    view.spec_info = None
    view.seq_lens = forward_batch.seq_lens + 1
    batch_size = int(forward_batch.seq_lens.shape[0])
    if getattr(forward_batch, "seq_lens_sum", None) is not None:
        view.seq_lens_sum = forward_batch.seq_lens_sum + batch_size
    if getattr(forward_batch, "seq_lens_cpu", None) is not None:
        view.seq_lens_cpu = forward_batch.seq_lens_cpu + 1
    return view


def _batch_arg(args: tuple[Any, ...], kwargs: dict[str, Any], position: int) -> Any:
    return args[position] if len(args) > position else kwargs.get("forward_batch")


def hook_init_forward_metadata(
    original: Callable[..., Any], backend: Any, *args: Any, **kwargs: Any
) -> Any:
    """``init_forward_metadata(forward_batch)`` / ``init_forward_metadata_out_graph(forward_batch, ...)``."""
    forward_batch = _batch_arg(args, kwargs, 0)
    if is_one_token_verify(backend, forward_batch):
        view = as_decode(forward_batch)
        if args:
            args = (view, *args[1:])
        else:
            kwargs = {**kwargs, "forward_batch": view}
    return original(backend, *args, **kwargs)


def hook_forward_extend(original: Callable[..., Any], backend: Any, *args: Any, **kwargs: Any) -> Any:
    """``forward_extend(q, k, v, layer, forward_batch, save_kv_cache, ...)``: same arguments as decode's."""
    if is_one_token_verify(backend, _batch_arg(args, kwargs, 4)):
        return backend.forward_decode(*args, **kwargs)
    return original(backend, *args, **kwargs)


HOOKS: dict[str, Callable[..., Any]] = {
    "init_forward_metadata": hook_init_forward_metadata,
    "init_forward_metadata_out_graph": hook_init_forward_metadata,
    "forward_extend": hook_forward_extend,
}


def missing_targets() -> list[str]:
    """The hooked methods this SGLang lacks, empty when all exist (0.5.17 and 0.5.23 have them)."""
    import importlib

    module_name, class_name = TRITON_BACKEND
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        return [f"{module_name}.{class_name} ({exc})"]
    return [f"{class_name}.{name}" for name in HOOKS if not callable(getattr(cls, name, None))]


def register() -> None:
    """Entry point (``sglang.srt.plugins``): SGLang's ``load_plugins()`` calls it in each of its processes."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        print(f"spectower gated decode: off ({DISABLE_ENV}=0)", file=sys.stderr, flush=True)
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    except ImportError as exc:
        logger.warning("spectower gated decode: NOT hooking: no SGLang HookRegistry (%s)", exc)
        return
    missing = missing_targets()
    if missing:
        logger.warning("spectower gated decode: NOT hooking (missing %s); gated batches run SGLang's own "
                       "one-token verify", ", ".join(missing))  # fmt: skip
        return
    module_name, class_name = TRITON_BACKEND
    for name, hook in HOOKS.items():
        HookRegistry.register(f"{module_name}.{class_name}.{name}", hook, HookType.AROUND)
    # SGLang configures logging after the plugins load: print the one line that says what was hooked.
    print(f"spectower gated decode: AROUND hooks on {class_name}.{', '.join(HOOKS)} (pid {os.getpid()})",
          file=sys.stderr, flush=True)  # fmt: skip
