"""What one simulator process is asked to be: the profile plus the flags of ``spectower sim serve``."""

from __future__ import annotations

from dataclasses import dataclass

from ..plugin import explore, knob_contract
from .accept_kinds import AcceptKind
from .profile import Profile

# Data-parallel ranks, each a scheduler task: past this a value is a typo (1e5 took 12 s and 1.1 GB to start).
MAX_DP_SIZE = 256

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000
DEFAULT_SEED = 0
# SGLang's default --decode-log-interval: gauges refresh every 40 decode steps.
DEFAULT_DECODE_LOG_INTERVAL = 40
DEFAULT_DP_SIZE = 1
SGLANG_VERSION = "0.5.23"
ENV_ADMIN_API_KEY = "SPECTOWER_SIM_ADMIN_API_KEY"
ENV_API_KEY = "SPECTOWER_SIM_API_KEY"


@dataclass(frozen=True)
class SimConfig:
    profile: Profile
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    seed: int = DEFAULT_SEED
    admin_api_key: str | None = None
    api_key: str | None = None
    gpu_metrics_port: int | None = None
    decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL
    dp_size: int = DEFAULT_DP_SIZE
    max_running_requests: int | None = None
    # The SGLang plugin's exploration share (plugin/knob_contract.py): every round(1/share)-th decode batch
    # of a batch-size bin runs the other mode; 0 = none. `sim serve` takes SPECTOWER_EXPLORE_SHARE too.
    explore_share: float = knob_contract.DEFAULT_EXPLORE_SHARE
    # The plugin's exploration windows (plugin/explore.py): batches per cycle, 0 = none.
    # `sim serve` takes SPECTOWER_EXPLORE_CYCLE, as the plugin does.
    explore_cycle: int = explore.WINDOW_CYCLE_BATCHES
    # Requests that accept differently (simulator/accept_kinds.py); () = the profile's accept length for all
    accept_kinds: tuple[AcceptKind, ...] = ()

    @property
    def effective_max_running_requests(self) -> int:
        return self.max_running_requests or self.profile.max_running_requests

    def __post_init__(self) -> None:
        if self.decode_log_interval < 1:
            raise ValueError(f"decode-log-interval must be >= 1, got {self.decode_log_interval}")
        if not 1 <= self.dp_size <= MAX_DP_SIZE:
            raise ValueError(f"dp-size must be between 1 and {MAX_DP_SIZE}, got {self.dp_size}")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise ValueError(f"max-running-requests must be >= 1, got {self.max_running_requests}")
        knob_contract.explore_share_of(self.explore_share, "explore-share")  # ContractError is a ValueError
        explore.cycle_of(str(self.explore_cycle))  # ValueError naming SPECTOWER_EXPLORE_CYCLE
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535, got {self.port}")
        if self.gpu_metrics_port is not None and not 0 <= self.gpu_metrics_port <= 65535:
            raise ValueError(f"gpu-metrics-port must be 0..65535, got {self.gpu_metrics_port}")
