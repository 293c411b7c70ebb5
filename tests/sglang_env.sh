#!/usr/bin/env bash
# Prints (last line of stdout) a python that can import SGLang 0.5.23's classes on a CPU-only machine,
# building the virtual environment first when it is missing. Idempotent: a marker file records a complete
# build, so a second run only prints the path. Progress goes to stderr.
#
# Where: ${SPECTOWER_SGLANG_VENV:-$HOME/.cache/spectower/sglang-0.5.23} (about 1.8 GB; 2-4 min to build).
# What: torch 2.13.0 (the CPU wheel pip finds locally), sglang 0.5.23 without its dependency tree (that
# tree pulls CUDA kernels), the pure-Python packages the scheduler / speculative modules import, and two
# stand-in modules: `triton` (imported unconditionally by sglang.srt.utils.common) and `torchvision`
# (imported by sglang.srt.multimodal.internvl_utils, reached from internal_state.py; PyPI's torchvision
# cannot load beside a CPU torch). Both stand-ins only need to survive import: no kernel ever runs here.
# Beside it, $VENV/overlay-sglang-0.5.17: SGLang 0.5.17 for the same checks (see the end of this script).
#
# pip's complaints about sglang's unmet pins (torch 2.14.1, CUDA kernels, ...: installed without its
# dependency tree on purpose) and this machine's "Location ... is ignored" notes are filtered out; the
# import checks decide success.
#
# spectower itself is NOT installed here: the plugin tests put the current checkout and a generated
# .dist-info (entry point group sglang.srt.plugins) on PYTHONPATH, so the checkout under test is the one
# SGLang's real load_plugins() discovers, wherever CI cloned it.
set -euo pipefail

VENV="${SPECTOWER_SGLANG_VENV:-$HOME/.cache/spectower/sglang-0.5.23}"
MARKER="$VENV/.spectower-sglang-env-v3"
PY="$VENV/bin/python"

if [ -f "$MARKER" ] && [ -x "$PY" ]; then
  echo "$PY"
  exit 0
fi

log() { echo "sglang_env: $*" >&2; }
start=$(date +%s)
mkdir -p "$(dirname "$VENV")"
if [ ! -x "$PY" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV" >&2
fi

pip_install() {
  # pip's own output, minus the noise described above; a failing pip fails the build.
  local out rc=0
  out="$("$PY" -m pip install -q --disable-pip-version-check "$@" 2>&1)" || rc=$?
  if [ -n "$out" ]; then
    grep -v -e '^WARNING: Location' -e '^sglang [0-9.]* requires ' -e "pip's dependency resolver" \
      <<<"$out" >&2 || true
  fi
  return "$rc"
}
log "installing torch 2.13.0 (CPU)"
pip_install "torch==2.13.0"
log "installing sglang 0.5.23 (no deps)"
pip_install --no-deps "sglang==0.5.23"
log "installing the pure-Python dependencies"
pip_install numpy orjson psutil pybase64 requests packaging pillow starlette msgspec pydantic pyzmq tqdm \
  IPython aiohttp "transformers==5.19.0" dill "apache-tvm-ffi==0.1.11" "sentencepiece==0.2.1" \
  "compressed-tensors==0.18.0" gguf "openai==2.8.0" partial_json_parser setproctitle einops uvicorn fastapi \
  uvloop

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
log "writing the triton / torchvision stand-ins into $SITE"
"$PY" "$(dirname "$0")/sglang_plugin_checks/install_stubs.py" "$SITE" >&2

log "checking that the classes import"
"$PY" - >&2 <<'EOF'
from sglang.srt.managers.scheduler import Scheduler  # noqa: F401
from sglang.srt.managers.tokenizer_manager import TokenizerManager  # noqa: F401
from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: F401
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams  # noqa: F401
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2  # noqa: F401
EOF

# SGLang 0.5.17 (the plugin supports both) as an overlay the tests put first on PYTHONPATH: its package, the
# xgrammar it imports at module level, and a sitecustomize that lets it re-register configs transformers
# 5.19 already defines (0.5.17 registers 'qwen3_asr' again). Same venv, same stand-ins.
OVERLAY="$VENV/overlay-sglang-0.5.17"
log "installing the SGLang 0.5.17 overlay into $OVERLAY"
rm -rf "$OVERLAY"
pip_install --no-deps --target "$OVERLAY" "sglang==0.5.17" "xgrammar==0.2.1"
cat >"$OVERLAY/sitecustomize.py" <<'PYEOF'
"""spectower tests: let SGLang 0.5.17 register configs that transformers 5.19 already has."""
from transformers import AutoConfig

_register = AutoConfig.register


def _register_again(model_type, config, exist_ok=False):
    return _register(model_type, config, exist_ok=True)


AutoConfig.register = staticmethod(_register_again)
PYEOF
log "checking that the 0.5.17 classes import"
PYTHONPATH="$OVERLAY" "$PY" - >&2 <<'PYEOF'
import sglang
from sglang.srt.managers.scheduler import Scheduler  # noqa: F401
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2  # noqa: F401
assert "overlay-sglang-0.5.17" in sglang.__file__, sglang.__file__
PYEOF

touch "$MARKER"
log "ready in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
echo "$PY"
