"""SGLang's resolved server args, as a real 0.5.17 server reports them in ``/server_info``.

Generated once from ``tests/fixtures/real/sglang-0.5.17-h200/server_info_idle.json`` (a capture, not code)
into ``sglang_server_args.json`` beside this module: the simulator starts from these and overrides what its
profile and flags decide, so every key a client may read exists with SGLang's type. ``INTERNAL_ONLY`` are the
keys that appear only inside ``internal_states[i]`` (the scheduler's copy of the args).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

_TEMPLATE: dict[str, Any] = json.loads(
    resources.files("spectower.simulator").joinpath("sglang_server_args.json").read_text(encoding="utf-8")
)


def server_args_template() -> dict[str, Any]:
    """A fresh deep copy of the flat server args (top level of ``/server_info``)."""
    return copy.deepcopy(_TEMPLATE["server_args"])


def internal_only_template() -> dict[str, Any]:
    """Keys a scheduler adds to its copy of the args in ``internal_states[i]``."""
    return copy.deepcopy(_TEMPLATE["internal_only"])
