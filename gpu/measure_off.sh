#!/usr/bin/env bash
# "Off means off" on a real GPU (issue #12): a plain SGLang server (no speculation) beside an EAGLE-3 server
# with spectower's plugin, both serving the constructed 8B-shaped pair (gpu/make_models.py) on one GPU, so
# the knob's off state is measured against what the same model serves without speculation.
#
#   PHASE=launch  bash gpu/measure_off.sh   # bundle, models, both servers (left running: setsid), acceptance
#   PHASE=measure bash gpu/measure_off.sh   # three curves in one sweep, then SGLang's profiler per state
#
# With the device tool, the two phases are two calls made back to back (a machine stays warm ~30 s):
#   run(command="PHASE=launch bash gpu/measure_off.sh", carry=["gpu/bundle/sglang-0.5.17-py312.tar.xz"])
#   run(command="PHASE=measure bash gpu/measure_off.sh", carry=[...same...])
# Results in $OUT: launch.log / measure.log, accept.json, sweep.json, profile.json (replayable, three
# curves), bench.db (the saved run), kernels.json (per-step GPU time by state and concurrency).
# ATTN=flashinfer measures the other attention backend (default triton); LEVELS, SWEEP_SECONDS, PROF_LEVELS.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PHASE=${PHASE:-launch}
exec > >(tee -a "$OUT/$PHASE.log") 2>&1
WORK=/tmp/spectower-off
SITE=$WORK/site
ATTN=${ATTN:-triton}
SPEC_PORT=30000 PLAIN_PORT=30001
SPEC_URL=http://127.0.0.1:$SPEC_PORT PLAIN_URL=http://127.0.0.1:$PLAIN_PORT
LEVELS=${LEVELS:-1,2,4,8,16,32,64}
PROF_LEVELS=${PROF_LEVELS:-1 16 64}
SWEEP_SECONDS=${SWEEP_SECONDS:-6}
MAX_RUNNING=64
PROF_STEPS=12
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
st() { python3 -m spectower.console.cli "$@"; }
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 SGLANG_ENABLE_JIT_DEEPGEMM=0
export SPECTOWER_ADMIN_KEY_FILE=$WORK/admin_key

launch_server() {  # name port mem_fraction extra-flags...
  local name=$1 port=$2 fraction=$3; shift 3
  setsid python3 -m sglang.launch_server --model-path "$WORK/models/target" --tokenizer-path "$WORK/models/target" \
    --attention-backend "$ATTN" --sampling-backend pytorch --cuda-graph-max-bs $MAX_RUNNING \
    --mem-fraction-static "$fraction" --max-running-requests $MAX_RUNNING --context-length 4096 --enable-metrics \
    --host 127.0.0.1 --port "$port" --admin-api-key "$(cat "$WORK/admin_key")" "$@" > "$WORK/$name.log" 2>&1 &
  echo $! > "$WORK/$name.pid"
  for _ in $(seq 1 280); do
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { say "$name healthy"; return 0; }
    kill -0 "$(cat "$WORK/$name.pid")" 2>/dev/null || break
    sleep 1
  done
  say "$name did not come up"; grep -v server_args= "$WORK/$name.log" | tail -40; return 1
}

if [ "$PHASE" = launch ]; then
  rm -rf "$WORK" && mkdir -p "$SITE"
  tar -C "$SITE" -xJf gpu/bundle/sglang-0.5.17-py312.tar.xz || { say "no bundle: run gpu/build_bundle.sh"; exit 2; }
  python3 tests/namespace_tree.py "$SITE" >/dev/null
  mkdir -p "$SITE/spectower-0.1.0.dist-info"
  printf 'Metadata-Version: 2.1\nName: spectower\nVersion: 0.1.0\n' > "$SITE/spectower-0.1.0.dist-info/METADATA"
  printf '[sglang.srt.plugins]\nspectower = spectower.control.sglang_plugin:register\n' \
    > "$SITE/spectower-0.1.0.dist-info/entry_points.txt"
  python3 -c 'import sglang, torch; print("sglang", sglang.__version__, "torch", torch.__version__)'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  say "models: the 8B-shaped pair whose drafts land (fixed share 0.5)"
  python3 gpu/make_models.py write "$WORK/models" --shape 8b --fixed-share 0.5 || exit 1
  st sglang-config --steps 3 --max-running-requests $MAX_RUNNING --out "$WORK/adaptive.json" >/dev/null || exit 1
  python3 -c 'import secrets; print("k" + secrets.token_urlsafe(24))' > "$WORK/admin_key"; chmod 600 "$WORK/admin_key"
  # The first server sizes its pool from the whole card, the second from what is left: spec first, small.
  launch_server spec $SPEC_PORT 0.35 --speculative-algorithm EAGLE3 \
    --speculative-draft-model-path "$WORK/models/draft" --speculative-num-steps 3 --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 --speculative-adaptive --speculative-adaptive-config "$WORK/adaptive.json" \
    || exit 1
  grep -E "spectower plugin" "$WORK/spec.log" | grep -v server_args= | head -2
  launch_server plain $PLAIN_PORT 0.62 || exit 1
  say "acceptance: greedy requests against what the construction says"
  python3 gpu/check_acceptance.py --server "$SPEC_URL" --plain "$PLAIN_URL" --out "$OUT/accept.json"
  say "launch done (servers keep running for PHASE=measure)"
  exit 0
fi

# ---- PHASE=measure ----------------------------------------------------------------------------------
for url in "$SPEC_URL" "$PLAIN_URL"; do
  curl -fsS "$url/health" >/dev/null || { say "$url is not up: run PHASE=launch first (same machine)"; exit 1; }
done
DB=sqlite:///$OUT/bench.db
say "three curves, one client: knob on, knob off (spectower_spec_max_bs 0), plain server; C=$LEVELS"
st bench sweep --server "$SPEC_URL" --plain-server "$PLAIN_URL" --concurrency "$LEVELS" --modes on,off \
  --duration-per-level "$SWEEP_SECONDS" --warmup 4 --output-len 256 --input-len 64 --api generate \
  --tag "h200-sglang-0.5.17-$ATTN-8b-pair" --save --db "$DB" --profile-out "$OUT/profile.json" --as gpu-check \
  --json > "$OUT/sweep.json"
say "sweep exit $?"
python3 - "$OUT/sweep.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({k: v for k, v in d.items() if k != "points"}, indent=1)[:4000])
PY

profile() {  # label url concurrency
  local label=$1 url=$2 c=$3
  st bench load --server "$url" --pattern "steps:$c" --period 30s --duration 22s --output-len 256 --api generate \
    > "$WORK/load_$label.log" 2>&1 &
  local load=$!
  sleep 8
  curl -s -X POST -H "Authorization: Bearer $(cat "$WORK/admin_key")" -H 'content-type: application/json' \
    -d "{\"output_dir\": \"$WORK/prof/$label\", \"num_steps\": $PROF_STEPS, \"activities\": [\"GPU\"], \"profile_prefix\": \"$label\"}" \
    "$url/start_profile" >/dev/null
  wait $load
  for _ in $(seq 1 20); do ls "$WORK/prof/$label"/*.json* >/dev/null 2>&1 && break; sleep 1; done
}
traces=()
for c in $PROF_LEVELS; do
  st control set --server "$SPEC_URL" --off --reason "off-means-off profile" --as gpu-check --yes >/dev/null
  profile "off-c$c" "$SPEC_URL" "$c"
  st control set --server "$SPEC_URL" --on --reason "off-means-off profile" --as gpu-check --yes >/dev/null
  profile "on-c$c" "$SPEC_URL" "$c"
  profile "plain-c$c" "$PLAIN_URL" "$c"
  traces+=("knob-off@C$c=$WORK/prof/off-c$c" "knob-on@C$c=$WORK/prof/on-c$c" "plain@C$c=$WORK/prof/plain-c$c")
  say "profiled C=$c"
done
python3 gpu/profile_table.py --steps $PROF_STEPS --json "$OUT/kernels.json" "${traces[@]}"
grep -E "spectower" "$WORK/spec.log" | grep -v server_args= | tail -3
say "measure done"
