#!/usr/bin/env bash
# "Off means off" on a real GPU (issue #12): a plain SGLang server (no speculation) beside an EAGLE-3 server
# with spectower's plugin, both serving the constructed 8B-shaped pair (gpu/make_models.py) on one GPU, so
# the knob's off state is measured against what the same model serves without speculation.
#
#   PHASES="launch accept gated profile" bash gpu/measure_off.sh   # one ~9 min call
#   PHASES="launch sweep" bash gpu/measure_off.sh            # another
#
# launch: bundle, models, both servers (setsid: a later call on the same warm machine reuses them; launch is
# skipped when both answer); accept: greedy requests against what the construction says; sweep: knob on,
# knob off and the plain server in one `bench sweep`; profile: SGLang's profiler per state and concurrency.
# With the device tool: run(command='PHASES="launch accept profile" bash gpu/measure_off.sh',
#   carry=["gpu/bundle/sglang-0.5.17-py312.tar.xz"]). Results in $OUT: measure.log, accept.json,
# sweep.json, profile.json (replayable, three curves), bench.db (the saved run), kernels.json.
# ATTN=flashinfer measures the other attention backend (default triton); LEVELS, SWEEP_SECONDS, PROF_LEVELS.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PHASES=${PHASES:-launch accept profile}
exec > >(tee -a "$OUT/measure.log") 2>&1
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
# -P: the checkout's own spectower/ folder (cwd) must not shadow the installed-layout tree on PYTHONPATH
st() { python3 -P -m spectower.console.cli "$@"; }
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 SGLANG_ENABLE_JIT_DEEPGEMM=0
export SPECTOWER_ADMIN_KEY_FILE=$WORK/admin_key

start_server() {  # name port mem_fraction extra-flags...: starts it, returns at once
  local name=$1 port=$2 fraction=$3; shift 3
  setsid python3 -P -m sglang.launch_server --model-path "$WORK/models/target" --tokenizer-path "$WORK/models/target" \
    --attention-backend "$ATTN" --sampling-backend pytorch --cuda-graph-max-bs $MAX_RUNNING \
    --mem-fraction-static "$fraction" --max-running-requests $MAX_RUNNING --context-length 4096 --enable-metrics \
    --host 127.0.0.1 --port "$port" --admin-api-key "$(cat "$WORK/admin_key")" "$@" > "$WORK/$name.log" 2>&1 &
  echo $! > "$WORK/$name.pid"
}

wait_for() {  # name port pattern: until the log shows pattern ("" = until /health answers)
  local name=$1 port=$2 pattern=$3
  for _ in $(seq 1 300); do
    if [ -n "$pattern" ]; then grep -qE "$pattern" "$WORK/$name.log" 2>/dev/null && return 0
    else curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { say "$name healthy"; return 0; }; fi
    kill -0 "$(cat "$WORK/$name.pid")" 2>/dev/null || break
    sleep 1
  done
  say "$name did not come up"; grep -v server_args= "$WORK/$name.log" | tail -40; return 1
}

do_launch() {
  if curl -fsS "$SPEC_URL/health" >/dev/null 2>&1 && curl -fsS "$PLAIN_URL/health" >/dev/null 2>&1; then
    say "both servers already up"; return 0
  fi
  rm -rf "$WORK" && mkdir -p "$SITE"
  tar -C "$SITE" -xJf gpu/bundle/sglang-0.5.17-py312.tar.xz || { say "no bundle: run gpu/build_bundle.sh"; exit 2; }
  python3 tests/namespace_tree.py --dist-info "$SITE" >/dev/null
  python3 -c 'import sglang, torch; print("sglang", sglang.__version__, "torch", torch.__version__)'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  say "models: the 8B-shaped pair whose drafts land (fixed share 0.5)"
  python3 gpu/make_models.py write "$WORK/models" --shape 8b --fixed-share 0.5 || exit 1
  st sglang-config --steps 3 --max-running-requests $MAX_RUNNING --out "$WORK/adaptive.json" >/dev/null || exit 1
  python3 -c 'import secrets; print("k" + secrets.token_urlsafe(24))' > "$WORK/admin_key"; chmod 600 "$WORK/admin_key"
  # Each server sizes its KV pool from the memory free when it loads: the EAGLE-3 one first (a third of the
  # card), the plain one once that pool is allocated (it then takes what --mem-fraction-static leaves it);
  # the two CUDA-graph captures overlap.
  start_server spec $SPEC_PORT 0.35 --speculative-algorithm EAGLE3 \
    --speculative-draft-model-path "$WORK/models/draft" --speculative-num-steps 3 --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 --speculative-adaptive --speculative-adaptive-config "$WORK/adaptive.json"
  wait_for spec $SPEC_PORT "KV Cache is allocated|Memory pool end|Capture cuda graph begin" || return 1
  say "spec: KV pool allocated; starting the plain server"
  start_server plain $PLAIN_PORT 0.62
  wait_for spec $SPEC_PORT "" && wait_for plain $PLAIN_PORT "" || return 1
  grep -E "spectower plugin" "$WORK/spec.log" | grep -v server_args= | head -2
}

do_accept() {
  say "acceptance: greedy requests against what the construction says"
  # reported, not fatal: the measurements below are worth having either way
  python3 gpu/check_acceptance.py --server "$SPEC_URL" --plain "$PLAIN_URL" --out "$OUT/accept.json" \
    || say "acceptance differs from the construction (see above)"
}

do_gated() {
  say "gated: knob at 0 (every batch a one-token verify), then back on: tokens as constructed both ways"
  st control set --server "$SPEC_URL" --off --reason "off-means-off check" --as gpu-check --yes >/dev/null
  python3 gpu/check_acceptance.py --server "$SPEC_URL" --gated --out "$OUT/accept_gated.json" \
    || say "gated answers differ from the construction (see above)"
  st control set --server "$SPEC_URL" --on --reason "off-means-off check" --as gpu-check --yes >/dev/null
  python3 gpu/check_acceptance.py --server "$SPEC_URL" --out "$OUT/accept_back_on.json" \
    || say "answers after switching back on differ from the construction (see above)"
  st control release --server "$SPEC_URL" --reason "off-means-off check done" --as gpu-check >/dev/null
}

do_lock() {
  say "the lock lives on the server: a manual --off holds against a policy's write until released"
  st control set --server "$SPEC_URL" --off --hold 10m --reason "incident drill" --as gpu-check --yes
  # a policy's write, as `control auto` sends it (writer 2): the plugin itself must refuse it
  curl -s -X POST -H "Authorization: Bearer $(cat "$WORK/admin_key")" -H 'content-type: application/json' \
    -d '{"server_args": {"spectower_spec_max_bs": 64, "spectower_writer": 2}}' "$SPEC_URL/set_internal_state"
  echo " <- policy write while the manual lock holds (want false)"
  st control get --server "$SPEC_URL" --json > "$OUT/lock_held.json"; python3 - "$OUT/lock_held.json" <<'PY'
import json, sys
print(json.dumps(json.load(open(sys.argv[1])), indent=1)[:1500])
PY
  st control release --server "$SPEC_URL" --reason "incident drill over" --as gpu-check
  curl -s -X POST -H "Authorization: Bearer $(cat "$WORK/admin_key")" -H 'content-type: application/json' \
    -d '{"server_args": {"spectower_spec_max_bs": 64, "spectower_writer": 2}}' "$SPEC_URL/set_internal_state"
  echo " <- policy write after release (want true)"
}

do_sweep() {
  local DB=sqlite:///$OUT/bench.db
  say "three curves, one client: knob on, knob off (spectower_spec_max_bs 0), plain server; C=$LEVELS"
st bench sweep --server "$SPEC_URL" --plain-server "$PLAIN_URL" --concurrency "$LEVELS" --modes on,off \
  --duration-per-level "$SWEEP_SECONDS" --rounds "${ROUNDS:-2}" --warmup 4 --output-len 256 --input-len 64 --api generate \
  --tag "h200-sglang-0.5.17-$ATTN-8b-pair" --save --db "$DB" --profile-out "$OUT/profile.json" --as gpu-check \
  --json > "$OUT/sweep.json"
say "sweep exit $?"
python3 - "$OUT/sweep.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({k: v for k, v in d.items() if k != "points"}, indent=1)[:4000])
PY
}

profile() {  # label url concurrency
  local label=$1 url=$2 c=$3
  st bench load --server "$url" --pattern "steps:$c" --period 30s --duration 18s --output-len 256 --api generate \
    > "$WORK/load_$label.log" 2>&1 &
  local load=$!
  sleep 7
  curl -s -X POST -H "Authorization: Bearer $(cat "$WORK/admin_key")" -H 'content-type: application/json' \
    -d "{\"output_dir\": \"$WORK/prof/$label\", \"num_steps\": $PROF_STEPS, \"activities\": [\"GPU\"], \"profile_prefix\": \"$label\"}" \
    "$url/start_profile" >/dev/null
  wait $load
  for _ in $(seq 1 20); do ls "$WORK/prof/$label"/*.json* >/dev/null 2>&1 && break; sleep 1; done
}
do_profile() {
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
st control release --server "$SPEC_URL" --reason "off-means-off profile done" --as gpu-check >/dev/null
python3 gpu/profile_table.py --steps $PROF_STEPS --json "$OUT/kernels.json" "${traces[@]}"
}

for phase in $PHASES; do
  "do_$phase" || { say "$phase failed"; exit 1; }
done
grep -E "spectower" "$WORK/spec.log" | grep -v server_args= | tail -3
# the servers' logs without SGLang's server_args line (it holds the admin key)
for name in spec plain; do sed '/server_args=/d' "$WORK/$name.log" | tail -400 > "$OUT/$name-server.log"; done
say "done: $PHASES"
