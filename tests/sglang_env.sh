#!/usr/bin/env bash
# Prints (last line of stdout) a python that can import SGLang 0.5.23's classes on a CPU-only machine,
# building the virtual environment first when it is missing. Idempotent: a marker file records a complete
# build, so a second run only prints the path. Progress goes to stderr.
#
# Where: ${SPECTOWER_SGLANG_VENV:-$HOME/.cache/spectower/sglang-0.5.23}.
# pip's dependency-resolver complaints (sglang pins torch 2.14.1 and tokenizers 0.23.2; the classes the
# tests use import fine with these) and the "Location ... is ignored" notes of this machine's pip config are
# filtered out; the import check at the end is what decides success.
# What: torch 2.13.0 (the CPU wheel pip finds locally), sglang 0.5.23 without its dependency tree (that
# tree pulls CUDA kernels), the pure-Python packages the scheduler / speculative modules import, and two
# stand-in modules: `triton` (imported unconditionally by sglang.srt.utils.common) and `torchvision`
# (imported by sglang.srt.multimodal.internvl_utils, reached from internal_state.py; PyPI's torchvision
# cannot load beside a CPU torch). Both stand-ins only need to survive import: no kernel ever runs here.
#
# spectower itself is NOT installed here: the plugin tests put the current checkout and a generated
# .dist-info (entry point group sglang.srt.plugins) on PYTHONPATH, so the checkout under test is the one
# SGLang's real load_plugins() discovers, wherever CI cloned it.
set -euo pipefail

VENV="${SPECTOWER_SGLANG_VENV:-$HOME/.cache/spectower/sglang-0.5.23}"
MARKER="$VENV/.spectower-sglang-env-v1"
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
    grep -v -e '^WARNING: Location' -e 'requires torch==' -e 'requires tokenizers==' \
      -e "pip's dependency resolver" <<<"$out" >&2 || true
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
  "compressed-tensors==0.18.0" gguf "openai==2.8.0" partial_json_parser setproctitle einops uvicorn fastapi

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
log "writing the triton / torchvision stand-ins into $SITE"
"$PY" "$(dirname "$0")/sglang_plugin_checks/install_stubs.py" "$SITE" >&2

log "checking that the classes import"
"$PY" - >&2 <<'EOF'
from sglang.srt.managers.scheduler import Scheduler  # noqa: F401
from sglang.srt.plugins.hook_registry import HookRegistry  # noqa: F401
from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams  # noqa: F401
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2  # noqa: F401
EOF

touch "$MARKER"
log "ready in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
echo "$PY"
