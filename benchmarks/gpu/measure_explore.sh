#!/usr/bin/env bash
# What the gate's exploration costs on a real GPU: one EAGLE-3 server (SGLang 0.5.17, triton attention, the
# 8B-shaped pair of benchmarks/gpu/make_models.py, spectower's plugins) under a steady closed-loop load per level, the
# exploration share switched between 0 and 0.02 (the default) in interleaved windows; decode tok/s from
# the plugin's own counters (benchmarks/gpu/explore_ab.py). The knob stays unset (always on: explored batches are
# gated), and at the top level once more at 0 (always off: explored batches draft).
#
#   run(command="bash benchmarks/gpu/measure_explore.sh", carry=["benchmarks/gpu/bundle/sglang-0.5.17-py312.tar.xz"])
#
# Results in $OUT: explore.log (everything), explore.json (one object per level and knob).
# LEVELS (default "64 8"), WINDOW (s, default 10), ROUNDS (default 3), SHARES (default 0,0.02); about 8 min.
set -uo pipefail
# Every HTTP read here has a total deadline and a size cap (a server that hangs mid-answer must not eat the
# device call): 120 s covers /start_profile, which answers once its steps ran; 64 MiB, any answer here.
curl() { command curl --max-time "${CURL_MAX_S:-120}" --max-filesize 67108864 "$@"; }
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/explore.log") 2>&1
WORK=/tmp/spectower-explore
SITE=$WORK/site
PORT=30000
URL=http://127.0.0.1:$PORT
MAX_RUNNING=64
LEVELS=${LEVELS:-64 8}
WINDOW=${WINDOW:-10}
ROUNDS=${ROUNDS:-3}
SHARES=${SHARES:-0,0.02}
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # st, st_bg
cleanup() {
  [ -n "${LOAD_PID:-}" ] && kill -TERM "$LOAD_PID" 2>/dev/null
  [ -n "${SERVER_PID:-}" ] && { kill -TERM -- -"$SERVER_PID" 2>/dev/null; sleep 2; kill -KILL -- -"$SERVER_PID" 2>/dev/null; }
  grep -v server_args= "$WORK/server.log" 2>/dev/null | grep -E "spectower|Error|error" | head -20 > "$OUT/server_tail.log"
}
trap cleanup EXIT

rm -rf "$WORK" && mkdir -p "$SITE"
tar -C "$SITE" -xJf benchmarks/gpu/bundle/sglang-0.5.17-py312.tar.xz || { say "no bundle: run benchmarks/gpu/build_bundle.sh"; exit 2; }
python3 tests/namespace_tree.py --dist-info "$SITE" >/dev/null
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 SGLANG_ENABLE_JIT_DEEPGEMM=0
export SPECTOWER_ADMIN_KEY_FILE=$WORK/admin_key
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 benchmarks/gpu/make_models.py write "$WORK/models" --shape 8b --fixed-share 0.5 || exit 1
st sglang-config --steps 3 --max-running-requests $MAX_RUNNING --out "$WORK/adaptive.json" >/dev/null || exit 1
python3 -c 'import secrets; print("k" + secrets.token_urlsafe(24))' > "$WORK/admin_key"; chmod 600 "$WORK/admin_key"
say "launching the EAGLE-3 server"
setsid python3 -P -m sglang.launch_server --model-path "$WORK/models/target" --tokenizer-path "$WORK/models/target" \
  --attention-backend triton --sampling-backend pytorch --cuda-graph-max-bs $MAX_RUNNING \
  --mem-fraction-static 0.8 --max-running-requests $MAX_RUNNING --context-length 4096 --enable-metrics \
  --host 127.0.0.1 --port $PORT --admin-api-key "$(cat "$WORK/admin_key")" \
  --speculative-algorithm EAGLE3 --speculative-draft-model-path "$WORK/models/draft" --speculative-num-steps 3 \
  --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --speculative-adaptive \
  --speculative-adaptive-config "$WORK/adaptive.json" > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 400); do
  curl -fsS "$URL/health" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { say "server died"; grep -v server_args= "$WORK/server.log" | tail -40; exit 1; }
  sleep 1
done
say "server healthy"; grep -E "spectower plugin" "$WORK/server.log" | head -2

ab() {  # concurrency label
  st_bg bench load --server "$URL" --pattern "steps:$1" --period 100000s --output-len 256 --input-len 64 \
    --api generate --status-every 60s > "$WORK/load-$2.log" 2>&1
  LOAD_PID=$!
  sleep 8  # the batch fills and the CUDA graphs of this size warm up
  python3 -P benchmarks/gpu/explore_ab.py --server "$URL" --shares "$SHARES" --window "$WINDOW" --rounds "$ROUNDS" \
    --label "$2" --out "$OUT/explore.json"
  kill -TERM "$LOAD_PID" 2>/dev/null; wait "$LOAD_PID" 2>/dev/null; LOAD_PID=""
  sleep 2
}
for c in $LEVELS; do ab "$c" "on-c$c"; say "level $c done"; done
top=${LEVELS%% *}
curl -fsS -X POST -H "Authorization: Bearer $(cat "$WORK/admin_key")" -H 'content-type: application/json' \
  -d '{"server_args": {"spectower_spec_max_bs": 0}}' "$URL/set_internal_state"; echo " <- knob 0 (unmarked: no lock)"
ab "$top" "off-c$top"
say "done"
