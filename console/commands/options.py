"""The words every command shares, so one concept has one flag name and one help text across the CLI."""

from __future__ import annotations

SERVER_HELP = "SGLang server URL, e.g. http://127.0.0.1:30000"
DB_HELP = "database URL or SQLite path (default: $SPECTOWER_DB, else ./spectower.db)"
AS_HELP = "operator name for the audit trail (default: $SPECTOWER_OPERATOR, else your login)"
POLICY_HELP = "learn | threshold:N | always-on | always-off | sglang-default"
# Load shapes: `bench load --pattern` (live) and `sim evaluate --trace` (virtual time) use the same names.
TRACE_HELP = "a built-in trace (day, bursty, ramp, steps) or a JSON file of (t_seconds, concurrency) pairs"
# Both load generators speak the same API unless told otherwise.
API_DEFAULT = "openai"
API_HELP = "openai (/v1/completions) or generate (/generate)"
