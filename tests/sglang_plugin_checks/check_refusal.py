"""The plugin refuses, loudly and harmlessly.

Modes (argv[1]):
- no-adaptive CONFIG: the server runs without --speculative-adaptive: our key is answered updated=False,
  SGLang's own keys still work, get_internal_state says why, the steps are SGLang's.
- no-zero-band CONFIG: adaptive, but a band of the config lacks step 0: refused the same way.
- missing-target CONFIG: a target method is missing (as on a version without it): register() hooks nothing,
  SGLang's methods stay unwrapped and our key is refused by SGLang itself like any unknown key.
"""

from __future__ import annotations

import sys

import _harness


def main() -> None:
    mode, config_path = sys.argv[1], sys.argv[2]
    logs = _harness.capture_logs()
    if mode == "missing-target":
        from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

        del AdaptiveSpeculativeParams.on_verify_complete
    plugin = _harness.load_plugin()
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.plugins.hook_registry import HookRegistry
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    server_args = _harness.publish_context(config_path, adaptive=(mode != "no-adaptive"))
    scheduler = _harness.make_scheduler(server_args)
    knob = _harness.set_state(scheduler, {"spectower_spec_max_bs": 0})
    sglang_key = _harness.set_state(scheduler, {"speculative_accept_threshold_single": 0.5})
    state = _harness.get_state(scheduler)
    params = AdaptiveSpeculativeParams(initial_steps=_harness.N_STEPS, cfg_path=config_path)
    _harness.emit(
        {
            "mode": mode,
            "plugin_loaded": plugin is not None,
            "knob_updated": knob,
            "sglang_key_updated": sglang_key,
            "threshold_after": state.get("speculative_accept_threshold_single"),
            "spectower": state.get("spectower"),
            "steps_for_40": params.get_steps_for_batch(40),
            "hooked_targets": sorted(t for t in HookRegistry._hooks if HookRegistry._hooks[t]),
            # the targets a hook of the knob plugin's own module wraps (others' plugins may share a target)
            "knob_hooked_targets": sorted(
                t for t, hooks in HookRegistry._hooks.items()
                if any(getattr(h, "__module__", None) == "spectower.plugin.knob_gate" for _ht, h, _s in hooks)
            ),
            "set_internal_state_wrapped": hasattr(Scheduler.set_internal_state, "__wrapped__"),
            "warnings": logs.messages(name_prefix="", level=30),
        }
    )


if __name__ == "__main__":
    main()
