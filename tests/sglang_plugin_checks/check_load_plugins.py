"""SGLang's real load_plugins() finds spectower through its entry point and applies the five AROUND hooks.

Run inside the SGLang venv; see _harness.py for what is real. Prints one JSON object.
"""

from __future__ import annotations

import threading

import _harness


def main() -> None:
    logs = _harness.capture_logs()
    from importlib.metadata import entry_points

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    eps = [
        {"name": ep.name, "value": ep.value, "dist": ep.dist.name if ep.dist else None}
        for ep in entry_points(group="sglang.srt.plugins")
    ]
    plugin = _harness.load_plugin()
    targets = {}
    if plugin is not None:
        for module_name, class_name, method in plugin.TARGETS.values():
            target = f"{module_name}.{class_name}.{method}"
            hooks = HookRegistry._hooks.get(target, [])
            owner = getattr(__import__(module_name, fromlist=[class_name]), class_name)
            current = getattr(owner, method)
            targets[target] = {
                "hook_types": [ht.value for ht, _hook, _src in hooks],
                "sources": [src.plugin_name if src else None for _ht, _hook, src in hooks],
                "hooks_are_ours": [getattr(h, "__module__", None) == plugin.__name__ for _ht, h, _s in hooks],
                "patched": target in HookRegistry._patched,
                "wrapped": getattr(current, "__wrapped__", None) is not None,
                "around": all(ht is HookType.AROUND for ht, _h, _s in hooks),
            }
    _harness.emit(
        {
            "entry_points": eps,
            "plugin_loaded": plugin is not None,
            "plugin_file": getattr(plugin, "__file__", None),
            "targets": targets,
            "plugin_logs": logs.messages(),
            # the loop-stall plugin's watch thread, one in each process that loads it (plugin/stall_watch.py)
            "watch_threads": [t.name for t in threading.enumerate() if t.name == "spectower-stall-watch"],
        }
    )


if __name__ == "__main__":
    main()
