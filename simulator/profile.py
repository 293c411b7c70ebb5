"""Performance profiles: the JSON that drives the simulator and that a benchmark sweep writes.

The format is docs/design.md's: ascending ``concurrency``, aggregate ``output_tok_s.spec_on`` (knob on),
``output_tok_s.spec_off`` (the knob at 0: a speculative server whose batches are gated, which SGLang runs as
1-token TARGET_VERIFY steps) and, optionally, ``output_tok_s.plain`` (a server launched without speculation)
at each concurrency, ``accept_length`` per concurrency, and scalar facts about the server. Without ``plain``,
``spec_off`` stands for both (the older profiles' assumption, which a real H200 sweep contradicts: knob-off
served 0.51-0.67 of a plain server at 16-64 requests). ``speculative_algorithm: null`` makes the profile a
server without speculation (its curve is ``plain``, else ``spec_off``; no knob).

Optionally, ``output_tok_s.spec_off_warm``: gated batches while the draft model's KV extend still runs over
each new token (the draft stays warm for drafting later). spectower's gated-decode plugin skips that extend
only while the knob is at 0 and no batch explores (a lock holds the knob, or the exploration share is 0:
``plugin/knob_contract.py``, ``extend_skippable``), which is how a sweep measures ``spec_off``; under
any ceiling > 0, or the knob at 0 with exploration on, a gated batch pays the extend and runs this curve
(measured on an H200: 0.88-0.97 of ``spec_off``). Without it, ``spec_off`` stands for both (the extend free).

Between points the curves are interpolated with a monotone cubic (PCHIP) in log-concurrency, so a curve that
rises between two points never overshoots, and a profile replays smoothly.

Every field is bounded (the ``MAX_*`` constants) so that what the simulator and the harness allocate and
compute stays proportional to what a real server could have; a value out of bounds is one error line naming
the key.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..plugin.explore import DEFAULT_KEPT_EXTEND_TAX
from ..storage.files import FileReadError, is_file_path, parse_json_text, read_text_capped

PROFILE_PACKAGE = "spectower.simulator.profiles"
DEFAULT_PROFILE = "glm5-nvfp4-8x-rtx-pro-6000"

# Upper bounds of a profile's fields: generous for any real server, small enough that `sim evaluate` (a table
# per batch size up to max_running_requests) and `sim serve` stay within a few MB and a second of set-up.
MAX_POINTS = 128  # points of a curve
MAX_CONCURRENCY = 65536.0  # a curve's concurrency axis
MAX_RUNNING_REQUESTS = 4096  # SGLang's per-rank batch; the harness tabulates every size up to it
MAX_SPEC_STEPS = 64
MAX_ACCEPT_LENGTH = MAX_SPEC_STEPS + 1
MAX_TOK_S = 1e8  # aggregate output or prefill tokens/s
MAX_GPUS = 1024
MAX_GPU_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB per GPU
MAX_POWER_W = 100_000.0
MAX_NAME_CHARS = 256
MAX_PROFILE_BYTES = 1 << 20  # a profile file (JSON text)
MAX_CONTEXT_TOKENS = 1 << 24  # a server's context length
MAX_FIRST_TOKEN_LATENCY_S = 60.0  # time outside the GPU's work per request
MAX_DRAFT_PREFILL_SHARE = 0.5  # a draft model is a fraction of its target; half a prefill is already generous
MAX_S_PER_CONTEXT_TOKEN = 1e-3  # a decode step's cost per context token: a ms per token is already absurd


@dataclass(frozen=True)
class ContextCost:
    """What a decode step pays per token of context its requests hold (prompt + output so far), beyond the
    ``reference_tokens`` per request that the profile's own curves were measured at (a sweep's short
    prompts): attention reads every context token's KV each step, and a drafted step reads it for the verify
    and the draft's extend as well, so its cost per token is larger (simulator/open_loop.py's model)."""

    gated_s_per_token: float
    drafted_s_per_token: float
    reference_tokens: float


class ProfileError(ValueError):
    """A profile that cannot be used; the message names the offending key."""


@dataclass(frozen=True)
class GpuSpec:
    count: int
    name: str
    memory_mib: float
    power_limit_w: float


@dataclass(frozen=True)
class Profile:
    name: str
    served_model_name: str
    concurrency: tuple[float, ...]
    spec_off_tok_s: tuple[float, ...]  # the knob at 0 (gated batches), as measured where a sweep measured it
    spec_on_tok_s: tuple[float, ...]
    accept_length: tuple[float, ...]
    max_running_requests: int
    speculative_num_steps: int
    prefill_tok_s: float
    noise_cv: float
    gpus: GpuSpec
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    plain_tok_s: tuple[float, ...] | None = None  # a server without speculation; None: spec_off stands for it
    speculative: bool = True  # False: this profile is a server without speculation (no drafting, no knob)
    # Gated batches with the draft's KV extend running (module docstring); None: spec_off stands for it.
    spec_off_warm_tok_s: tuple[float, ...] | None = None
    # Open loop only (simulator/open_loop.py): a decode step's cost per context token (None: free, the
    # curves stand for every context length), and the server's context (None: prompts are never cut).
    context_cost: ContextCost | None = None
    context_length: int | None = None
    # Open loop only: seconds a request's answer spends outside the GPU's work (the HTTP server, the
    # tokenizer manager, the scheduler's and detokenizer's hand-offs), added to its TTFT and end-to-end
    # latency; 0: none.
    first_token_latency_s: float = 0.0
    # The share of a prefill's time that is the draft model's pass over the prompts (``prefill_tok_s`` has it
    # in; 0: not modelled). Where the plugin skips that pass (knob_contract.prefill_skippable: a lock at 0, or
    # gated load with nothing exploring) a prefill runs at ``prefill_tok_s / (1 - share)``, as a server
    # without speculation always does.
    draft_prefill_share: float = 0.0

    @property
    def plain_curve(self) -> tuple[float, ...]:
        """A server without speculation: ``plain`` where the profile has it, else ``spec_off``."""
        return self.plain_tok_s if self.plain_tok_s is not None else self.spec_off_tok_s

    @property
    def spec_off_warm_curve(self) -> tuple[float, ...]:
        """Gated batches with the draft's extend running: ``spec_off_warm`` where the profile has it, else
        ``spec_off`` less the extend's usual cost (``explore.DEFAULT_KEPT_EXTEND_TAX``, measured on the H200):
        a real server pays it wherever a gated batch keeps the extend."""
        if self.spec_off_warm_tok_s is not None:
            return self.spec_off_warm_tok_s
        return tuple(v * (1.0 - DEFAULT_KEPT_EXTEND_TAX) for v in self.spec_off_tok_s)

    def output_tok_s(self, concurrency: float, spec_on: bool, draft_warm: bool = False) -> float:
        """Aggregate output tokens/s at ``concurrency`` requests decoding together: knob on (``spec_on``) or
        gated: the knob at 0 as measured (``spec_off``, the draft's extend skipped) or, with ``draft_warm``,
        gated while the draft's extend runs (``spec_off_warm_curve``); a profile without speculation has one
        curve, ``plain_curve``."""
        if not self.speculative:
            curve = self.plain_curve
        elif spec_on:
            curve = self.spec_on_tok_s
        else:
            curve = self.spec_off_warm_curve if draft_warm else self.spec_off_tok_s
        return self._at(curve, concurrency)

    def plain_output_tok_s(self, concurrency: float) -> float:
        """Aggregate output tokens/s of a server without speculation (``plain_curve``)."""
        return self._at(self.plain_curve, concurrency)

    def _at(self, curve: Sequence[float], concurrency: float) -> float:
        if concurrency <= 0:
            return 0.0
        if concurrency < self.concurrency[0]:
            # Below the first point each request keeps the first point's per-request rate.
            return curve[0] / self.concurrency[0] * concurrency
        return _pchip(self.concurrency, curve, concurrency)

    def without_speculation(self) -> Profile:
        """The same server launched without speculation: the plain curve, no drafting, no knob."""
        raw = dict(self.raw)
        raw["speculative_algorithm"] = None
        prefill_tok_s = self.prefill_rate(draft_skipped=True)  # no draft pass at all
        raw.pop("draft_prefill_share", None)
        raw["prefill_tok_s"] = prefill_tok_s
        return replace(self, speculative=False, raw=raw, prefill_tok_s=prefill_tok_s, draft_prefill_share=0.0)

    def prefill_rate(self, draft_skipped: bool) -> float:
        """Prompt tokens/s of a prefill: ``prefill_tok_s`` with the draft's pass, faster without it."""
        return self.prefill_tok_s / (1.0 - self.draft_prefill_share) if draft_skipped else self.prefill_tok_s

    def per_request_tok_s(self, concurrency: float, spec_on: bool) -> float:
        """Output tokens/s one request sees when ``concurrency`` decode together."""
        c = max(concurrency, 1e-9)
        return self.output_tok_s(c, spec_on) / c

    def accept_length_at(self, concurrency: float) -> float:
        return _pchip(self.concurrency, self.accept_length, max(concurrency, self.concurrency[0]))

    def speedup(self, concurrency: float) -> float:
        return self.output_tok_s(concurrency, True) / self.output_tok_s(concurrency, False)

    def crossover(self) -> float | None:
        """The concurrency where spec-on stops beating spec-off (first sign change), or None."""
        points = self.concurrency
        ratios = [on / off for on, off in zip(self.spec_on_tok_s, self.spec_off_tok_s, strict=True)]
        for i in range(1, len(points)):
            if ratios[i - 1] >= 1.0 > ratios[i]:
                lo, hi = points[i - 1], points[i]
                for _ in range(60):  # bisection on the interpolated curves
                    mid = math.sqrt(lo * hi)
                    if self.speedup(mid) >= 1.0:
                        lo = mid
                    else:
                        hi = mid
                return (lo + hi) / 2
        return None

    def to_json(self) -> dict[str, Any]:
        data = dict(self.raw)
        data.update(
            {
                "name": self.name,
                "served_model_name": self.served_model_name,
                "concurrency": list(self.concurrency),
                "output_tok_s": {
                    "spec_off": list(self.spec_off_tok_s),
                    "spec_on": list(self.spec_on_tok_s),
                    **({"plain": list(self.plain_tok_s)} if self.plain_tok_s is not None else {}),
                    **(
                        {"spec_off_warm": list(self.spec_off_warm_tok_s)}
                        if self.spec_off_warm_tok_s is not None
                        else {}
                    ),
                },
                "accept_length": list(self.accept_length),
                "max_running_requests": self.max_running_requests,
                "speculative_num_steps": self.speculative_num_steps,
                "prefill_tok_s": self.prefill_tok_s,
                "noise_cv": self.noise_cv,
                "gpus": {
                    **dict(self.raw.get("gpus", {})),
                    "count": self.gpus.count,
                    "name": self.gpus.name,
                    "memory_mib": self.gpus.memory_mib,
                    "power_limit_w": self.gpus.power_limit_w,
                },
            }
        )
        return data


def builtin_profile_names() -> list[str]:
    root = resources.files(PROFILE_PACKAGE)
    return sorted(p.name.removesuffix(".json") for p in root.iterdir() if p.name.endswith(".json"))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a shipped profile by name, or any profile JSON by path."""
    text, source = _read_profile_text(str(name_or_path))
    try:
        data = parse_json_text(text)
    except FileReadError as exc:
        raise ProfileError(f"{source}: {exc}") from None
    return parse_profile(data, source=source)


def _read_profile_text(name_or_path: str) -> tuple[str, str]:
    if is_file_path(name_or_path):
        try:
            return read_text_capped(name_or_path, MAX_PROFILE_BYTES), name_or_path
        except FileReadError as exc:
            raise ProfileError(f"profile {name_or_path!r}: {exc}") from None
    if name_or_path not in builtin_profile_names():
        known = ", ".join(builtin_profile_names())
        raise ProfileError(
            f"profile {name_or_path!r}: no such file and no shipped profile of that name ({known})"
        )
    resource = resources.files(PROFILE_PACKAGE).joinpath(f"{name_or_path}.json")
    return resource.read_text(encoding="utf-8"), name_or_path


def parse_profile(data: Any, source: str = "profile") -> Profile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a profile is a JSON object, got {type(data).__name__}")
    concurrency = _series(data, "concurrency", source, maximum=MAX_CONCURRENCY)
    if any(b <= a for a, b in itertools.pairwise(concurrency)):
        raise ProfileError(f"{source}: 'concurrency' must be strictly ascending, got {list(concurrency)}")
    if concurrency[0] <= 0:
        raise ProfileError(f"{source}: 'concurrency' values must be > 0")
    curves = _curves(data, source, len(concurrency))
    gpus = _gpu_spec(data, source)
    served = _text(data, "served_model_name", source)
    if "name" in data and data["name"] is not None:
        _text(data, "name", source)
    noise_cv = _number(data, "noise_cv", source)
    if noise_cv > 0.5:
        raise ProfileError(f"{source}: 'noise_cv' must be between 0 and 0.5, got {noise_cv}")
    algorithm = data.get("speculative_algorithm", "EAGLE3")
    if algorithm is not None and (not isinstance(algorithm, str) or len(algorithm) > MAX_NAME_CHARS):
        raise ProfileError(
            f"{source}: 'speculative_algorithm' must be a name (e.g. EAGLE3) or null (no speculation), "
            f"got {_short(algorithm)}"
        )
    default_name = Path(source).stem if source.endswith(".json") else source
    return Profile(
        name=str(data.get("name") or default_name),
        served_model_name=served,
        concurrency=concurrency,
        spec_off_tok_s=curves["spec_off"],
        spec_on_tok_s=curves["spec_on"],
        accept_length=curves["accept_length"],
        max_running_requests=_integer(
            data, "max_running_requests", source, minimum=1, maximum=MAX_RUNNING_REQUESTS
        ),
        speculative_num_steps=_integer(
            data, "speculative_num_steps", source, minimum=1, maximum=MAX_SPEC_STEPS
        ),
        prefill_tok_s=_number(data, "prefill_tok_s", source, positive=True, maximum=MAX_TOK_S),
        noise_cv=noise_cv,
        gpus=gpus,
        raw=dict(data),
        plain_tok_s=curves.get("plain"),
        speculative=algorithm is not None,
        spec_off_warm_tok_s=curves.get("spec_off_warm"),
        context_cost=_context_cost(data, source),
        first_token_latency_s=(
            0.0
            if data.get("first_token_latency_s") is None
            else _number(data, "first_token_latency_s", source, maximum=MAX_FIRST_TOKEN_LATENCY_S)
        ),
        context_length=(
            None
            if data.get("context_length") is None
            else _integer(data, "context_length", source, minimum=2, maximum=MAX_CONTEXT_TOKENS)
        ),
        draft_prefill_share=(
            0.0
            if data.get("draft_prefill_share") is None
            else _number(data, "draft_prefill_share", source, maximum=MAX_DRAFT_PREFILL_SHARE)
        ),
    )


def _context_cost(data: dict[str, Any], source: str) -> ContextCost | None:
    """The optional ``context_cost`` object (seconds per context token of a gated and a drafted step, and
    the context per request the curves were measured at)."""
    cost = data.get("context_cost")
    if cost is None:
        return None
    if not isinstance(cost, dict):
        raise ProfileError(f"{source}: 'context_cost' must be an object with gated_s_per_token, "
                           "drafted_s_per_token and reference_tokens")  # fmt: skip
    per_token = {key: _number(cost, key, source, prefix="context_cost.", maximum=MAX_S_PER_CONTEXT_TOKEN)
                 for key in ("gated_s_per_token", "drafted_s_per_token")}  # fmt: skip
    reference = _number(cost, "reference_tokens", source, prefix="context_cost.", maximum=MAX_CONTEXT_TOKENS)
    return ContextCost(per_token["gated_s_per_token"], per_token["drafted_s_per_token"], reference)


_TOK_S_CURVES = ("spec_off", "spec_on", "plain", "spec_off_warm")  # plain and spec_off_warm are optional


def _curves(data: dict[str, Any], source: str, points: int) -> dict[str, tuple[float, ...]]:
    """The throughput curves under ``output_tok_s`` and ``accept_length``, by name, each checked to have one
    positive value per concurrency point."""
    tok_s = _require(data, "output_tok_s", source)
    if not isinstance(tok_s, dict):
        raise ProfileError(f"{source}: 'output_tok_s' must be an object with 'spec_off' and 'spec_on'")
    unknown = sorted(set(tok_s) - set(_TOK_S_CURVES))
    if unknown:
        raise ProfileError(
            f"{source}: 'output_tok_s.{unknown[0]}' is not a curve "
            "(expected spec_on, spec_off, plain, spec_off_warm)"
        )
    curves = {
        name: _series(tok_s, name, source, prefix="output_tok_s.", maximum=MAX_TOK_S)
        for name in _TOK_S_CURVES
        if name in ("spec_off", "spec_on") or name in tok_s
    }
    accept = _series(data, "accept_length", source, maximum=MAX_ACCEPT_LENGTH)
    keyed = {f"output_tok_s.{name}": values for name, values in curves.items()}
    for key, values in {**keyed, "accept_length": accept}.items():
        if len(values) != points:
            raise ProfileError(f"{source}: '{key}' has {len(values)} values but 'concurrency' has {points}")
        if any(v <= 0 for v in values):
            raise ProfileError(f"{source}: '{key}' values must be > 0")
    if any(a < 1.0 for a in accept):
        raise ProfileError(f"{source}: 'accept_length' values must be >= 1 (the bonus token counts)")
    return {**curves, "accept_length": accept}


def _gpu_spec(data: dict[str, Any], source: str) -> GpuSpec:
    gpus = _require(data, "gpus", source)
    if not isinstance(gpus, dict):
        raise ProfileError(f"{source}: 'gpus' must be an object")
    return GpuSpec(
        count=_integer(gpus, "count", source, prefix="gpus.", minimum=1, maximum=MAX_GPUS),
        name=_text(gpus, "name", source, prefix="gpus."),
        memory_mib=_number(
            gpus, "memory_mib", source, prefix="gpus.", positive=True, maximum=MAX_GPU_MEMORY_MIB
        ),
        power_limit_w=_number(
            gpus, "power_limit_w", source, prefix="gpus.", positive=True, maximum=MAX_POWER_W
        ),
    )


def _short(value: Any) -> str:
    """``repr`` cut to one short line (an error message never echoes a megabyte of input)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _require(obj: dict[str, Any], key: str, source: str, prefix: str = "") -> Any:
    if key not in obj:
        raise ProfileError(f"{source}: missing key '{prefix}{key}'")
    return obj[key]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(obj: dict[str, Any], key: str, source: str, prefix: str = "") -> str:
    value = _require(obj, key, source, prefix)
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ProfileError(
            f"{source}: '{prefix}{key}' must be a non-empty string of at most {MAX_NAME_CHARS} characters, "
            f"got {_short(value)}"
        )
    return value


def _number(
    obj: dict[str, Any],
    key: str,
    source: str,
    prefix: str = "",
    positive: bool = False,
    maximum: float | None = None,
) -> float:
    value = _require(obj, key, source, prefix)
    if not _is_number(value) or not math.isfinite(value):
        raise ProfileError(f"{source}: '{prefix}{key}' must be a finite number, got {_short(value)}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise ProfileError(f"{source}: '{prefix}{key}' must be {bound}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ProfileError(f"{source}: '{prefix}{key}' must be <= {maximum:g}, got {value!r}")
    return float(value)


def _integer(
    obj: dict[str, Any], key: str, source: str, prefix: str = "", minimum: int = 0, maximum: int | None = None
) -> int:
    value = _require(obj, key, source, prefix)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ProfileError(f"{source}: '{prefix}{key}' must be an integer >= {minimum}, got {_short(value)}")
    if maximum is not None and value > maximum:
        raise ProfileError(f"{source}: '{prefix}{key}' must be an integer <= {maximum}, got {value!r}")
    return value


def _series(
    obj: dict[str, Any], key: str, source: str, prefix: str = "", maximum: float | None = None
) -> tuple[float, ...]:
    value = _require(obj, key, source, prefix)
    if not isinstance(value, list) or not value:
        raise ProfileError(f"{source}: '{prefix}{key}' must be a non-empty list of numbers")
    if len(value) > MAX_POINTS:
        raise ProfileError(f"{source}: '{prefix}{key}' has {len(value)} points; at most {MAX_POINTS}")
    for i, item in enumerate(value):
        if not _is_number(item) or not math.isfinite(item):
            raise ProfileError(f"{source}: '{prefix}{key}[{i}]' must be a finite number, got {_short(item)}")
        if item < 0:
            raise ProfileError(f"{source}: '{prefix}{key}[{i}]' must not be negative, got {item!r}")
        if maximum is not None and item > maximum:
            raise ProfileError(f"{source}: '{prefix}{key}[{i}]' must be <= {maximum:g}, got {item!r}")
    return tuple(float(v) for v in value)


def _pchip(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Monotone cubic (Fritsch-Carlson) interpolation in log(x); flat beyond the last point."""
    if len(xs) == 1 or x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    return _interpolator(tuple(xs), tuple(ys))(x)


class _Pchip:
    """One curve's knots and slopes, computed once: each lookup is a bisection and one cubic, so tabulating
    a curve at every batch size up to ``MAX_RUNNING_REQUESTS`` stays in the milliseconds."""

    def __init__(self, xs: tuple[float, ...], ys: tuple[float, ...]) -> None:
        lx = [math.log(v) for v in xs]
        n = len(xs)
        h = [lx[i + 1] - lx[i] for i in range(n - 1)]
        delta = [(ys[i + 1] - ys[i]) / h[i] for i in range(n - 1)]
        slopes = [0.0] * n
        slopes[0], slopes[-1] = delta[0], delta[-1]
        for i in range(1, n - 1):
            if delta[i - 1] * delta[i] <= 0:
                slopes[i] = 0.0
            else:
                w1, w2 = 2 * h[i] + h[i - 1], h[i] + 2 * h[i - 1]
                slopes[i] = (w1 + w2) / (w1 / delta[i - 1] + w2 / delta[i])
        self.lx, self.ys, self.h, self.slopes = lx, ys, h, slopes

    def __call__(self, x: float) -> float:
        t = math.log(x)
        i = min(bisect.bisect_right(self.lx, t) - 1, len(self.h) - 1)
        ys, h, slopes = self.ys, self.h, self.slopes
        s = (t - self.lx[i]) / h[i]
        h00, h10 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s
        h01, h11 = -2 * s**3 + 3 * s**2, s**3 - s**2
        return h00 * ys[i] + h10 * h[i] * slopes[i] + h01 * ys[i + 1] + h11 * h[i] * slopes[i + 1]


@functools.lru_cache(maxsize=64)
def _interpolator(xs: tuple[float, ...], ys: tuple[float, ...]) -> _Pchip:
    return _Pchip(xs, ys)
