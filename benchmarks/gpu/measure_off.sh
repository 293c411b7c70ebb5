#!/usr/bin/env bash
# "Off means off" on a real GPU (issue #12): a plain SGLang server (no speculation) beside an EAGLE-3 server
# with spectower's plugin, both serving the constructed 8B-shaped pair (benchmarks/gpu/make_models.py) on one GPU, so
# the knob's off state is measured against what the same model serves without speculation.
#
#   PHASES="launch accept gated profile" bash benchmarks/gpu/measure_off.sh   # one ~9 min call
#   PHASES="launch sweep" bash benchmarks/gpu/measure_off.sh            # another
#
# launch: bundle, models, both servers (setsid: a later call on the same warm machine reuses them; launch is
# skipped when both answer); accept: greedy requests against what the construction says; sweep: knob on,
# knob off and the plain server in one `bench sweep`; profile: SGLang's profiler per state and concurrency.
# With the device tool: run(command='PHASES="launch accept profile" bash benchmarks/gpu/measure_off.sh',
#   carry=["benchmarks/gpu/bundle/sglang-0.5.17-py312.tar.xz"]). Results in $OUT: measure.log, accept.json,
# sweep.json, profile.json (replayable, three curves), bench.db (the saved run), kernels.json.
# ATTN=flashinfer measures the other attention backend (default triton); LEVELS, SWEEP_SECONDS, PROF_LEVELS.
# GPU_METRICS=URL: the GPUs from a dcgm-exporter (the sweep's --profile-out and learn's warm start) where NVML sees
# none, as on a rehearsal against `sim serve --gpu-metrics-port PORT`.
# ungated: the knob at max against an un-gated EAGLE-3 server on the plain port (UNGATED_ADAPTIVE=1: with the
# launch's adaptive config); respec: the speculative server alone again, SPEC_ENV="NAME=value ..." for it;
# abmax: the knob-at-max comparison again against the un-gated server already there (AB_LEVELS, AB_ROUNDS).
# policyoff (issue #32): a policy's 0 (unlocked, exploring; OFF_TAG names the run, e.g. after
# SPEC_ENV=SPECTOWER_EXPLORE_CYCLE=0 PHASES="respec policyoff") and an operator's 0 (OFF_OPERATOR=0 skips it),
# each against the plain server with mixed output lengths (OFF_OUTPUT_LEN, default 64-448) at OFF_LEVELS
# (OFF_POLICY=0 skips the policy's).
# reentry: the knob at 0 under load, then on: the draft-extend skip, the drain, drafting again (reentry.txt).
# policy + wait: POLICIES="learn on off threshold:47" LOAD_SECONDS=600 under one day-shaped load each (output
# lengths POLICY_OUTPUT_LEN, default 64-448; learn warm from WARM_PROFILE=profile.json when given); the
# runs go on in the background between device calls (call again within 30 s: PHASES=wait). A later call's
# policy phase adds its runs to the same folder and database (a policy run again: <name>-2, -3, ...) until a
# launch or respec starts a new speculative server. Closed-loop runs leave lean.json (explore_lean.py --json);
# LEAN_POOL="a/lean.json b/lean.json" (earlier launches of the same card) pools it with them (lean_pool.py).
# steps (issue #14, a middle step count): for each K in STEPS_LIST (default "1 2") an un-gated EAGLE-3 server at
# K steps (K+1 draft tokens, no plugin) replaces the plain one and benchmarks/gpu/knob_max_ab.py measures the gated
# 3-step server at knob max against it at STEPS_LEVELS (default LEVELS): steps-K.json; then
# benchmarks/gpu/steps_table.py over every steps-K.json of this machine and its sweep.json (steps_table.json). About
# 90 s per launch + 4 min per K at 7 levels: one K per call, after `launch sweep`, within 30 s of each other:
#   PHASES="launch sweep", then STEPS_LIST=1 PHASES=steps, then STEPS_LIST=2 PHASES=steps (not `launch`: the
#   plain port then holds an EAGLE-3 server, so launch would restart both and lose the sweep's servers).
set -uo pipefail
# Every HTTP read here has a total deadline and a size cap (a server that hangs mid-answer must not eat the
# device call): 120 s covers /start_profile, which answers once its steps ran; 64 MiB, any answer here.
curl() { command curl --max-time "${CURL_MAX_S:-120}" --max-filesize 67108864 "$@"; }
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
PHASES=${PHASES:-launch accept profile}
exec > >(tee -a "$OUT/measure.log") 2>&1
# WORK, SPEC_PORT, PLAIN_PORT: two copies of this script can run at once on two GPUs (benchmarks/gpu/policy_pair.sh:
# CUDA_VISIBLE_DEVICES, a WORK and ports each). PLAIN=0: no plain server (the policy phases never load it).
WORK=${WORK:-/tmp/spectower-off}
SITE=$WORK/site
ATTN=${ATTN:-triton}
# SERVER_ARGS_EXTRA: more launch flags for both servers, e.g. --disable-prefill-cuda-graph (a flashinfer
# launch spends ~190 s capturing prefill graphs; decode is unaffected)
SERVER_ARGS_EXTRA=${SERVER_ARGS_EXTRA:-}
SPEC_PORT=${SPEC_PORT:-30000} PLAIN_PORT=${PLAIN_PORT:-30001} PLAIN=${PLAIN:-1}
SPEC_URL=http://127.0.0.1:$SPEC_PORT PLAIN_URL=http://127.0.0.1:$PLAIN_PORT
LEVELS=${LEVELS:-1,2,4,8,16,32,64}
PROF_LEVELS=${PROF_LEVELS:-1 16 64}
SWEEP_SECONDS=${SWEEP_SECONDS:-6}
# mixed lengths (issue #32): requests of one length finish in waves, which a window's count reads as steps
SWEEP_OUTPUT_LEN=${SWEEP_OUTPUT_LEN:-64-448}
MAX_RUNNING=64
PROF_STEPS=12
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # st, st_bg
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1 SGLANG_ENABLE_JIT_DEEPGEMM=0
export SPECTOWER_ADMIN_KEY_FILE=$WORK/admin_key
# The CLI must start before a phase spends device time on it: the working tree travels as it is, and on
# 2026-12-02 a half-edited one made every `st` of a 410 s call fail while the phases went on without it.
cli_starts() {
  st --version >/dev/null || { say "spectower's CLI does not start (above): nothing measured"; exit 2; }
}
[ -d "$SITE/spectower" ] && cli_starts

# A profile leaves PyTorch's CUPTI on in the server it profiled (Kineto does not tear it down:
# pytorch/pytorch#144455), and every later kernel launch pays for it. A gated step, which launches many small
# kernels between its graphs, pays most: on 2026-12-02 a flashinfer server's knob at 0 served 0.92 of plain
# at 64 requests before two profiles and 0.82 after them, in the same launch (knob on and plain unchanged).
# So a phase that measures throughput refuses servers profiled since their launch.
PROFILED_MARK=$WORK/profiled
throughput_phase_ok() {  # phase
  [ -f "$PROFILED_MARK" ] || return 0
  if [ "${AFTER_PROFILE:-0}" = 1 ]; then
    say "$1: the servers were profiled since their launch; measured anyway (AFTER_PROFILE=1), not comparable"
    return 0
  fi
  say "$1: the servers were profiled since their launch (CUPTI stays on: pytorch/pytorch#144455); its figures" \
    "would not compare with an unprofiled server's. Launch again, or AFTER_PROFILE=1 to measure anyway"
  return 1
}

start_server() {  # name port mem_fraction extra-flags...: starts it, returns at once
  local name=$1 port=$2 fraction=$3; shift 3
  setsid python3 -P -m sglang.launch_server --model-path "$WORK/models/target" --tokenizer-path "$WORK/models/target" \
    --attention-backend "$ATTN" --sampling-backend pytorch --cuda-graph-max-bs $MAX_RUNNING \
    --mem-fraction-static "$fraction" --max-running-requests $MAX_RUNNING --context-length 4096 --enable-metrics \
    --host 127.0.0.1 --port "$port" --admin-api-key "$(cat "$WORK/admin_key")" \
    --gc-warning-threshold-secs "${GC_WARN_S:-0.05}" $SERVER_ARGS_EXTRA "$@" \
    > "$WORK/$name.log" 2>&1 &
  echo $! > "$WORK/$name.pid"
}

wait_for() {  # name port pattern: until the log shows pattern ("" = until /health answers), LAUNCH_WAIT_S at most
  local name=$1 port=$2 pattern=$3
  for i in $(seq 1 "${LAUNCH_WAIT_S:-300}"); do
    # every minute, the log's last line: where a slow launch (flashinfer's JIT builds) spends its time
    [ $((i % 60)) = 0 ] && say "$name still loading: $(grep -v server_args= "$WORK/$name.log" | tail -1 | cut -c1-160)"
    if [ -n "$pattern" ]; then grep -qE "$pattern" "$WORK/$name.log" 2>/dev/null && return 0
    else curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && { say "$name healthy"; return 0; }; fi
    kill -0 "$(cat "$WORK/$name.pid")" 2>/dev/null || break
    sleep 1
  done
  say "$name did not come up"; grep -v server_args= "$WORK/$name.log" | tail -40; return 1
}

do_launch() {
  if curl -fsS "$SPEC_URL/health" >/dev/null 2>&1 && { [ "$PLAIN" = 0 ] || { curl -fsS "$PLAIN_URL/health" \
    >/dev/null 2>&1 && [ "$(cat "$WORK/plain.kind" 2>/dev/null)" = plain ]; }; }; then
    say "both servers already up"; return 0
  fi
  for f in "$WORK"/*.pid; do [ -f "$f" ] && kill -- -"$(cat "$f")" 2>/dev/null && sleep 5; done
  rm -rf "$WORK" && mkdir -p "$SITE" && echo plain > "$WORK/plain.kind"
  tar -C "$SITE" -xJf benchmarks/gpu/bundle/sglang-0.5.17-py312.tar.xz || { say "no bundle: run benchmarks/gpu/build_bundle.sh"; exit 2; }
  python3 tests/namespace_tree.py --dist-info "$SITE" >/dev/null
  cli_starts
  python3 -c 'import sglang, torch; print("sglang", sglang.__version__, "torch", torch.__version__)'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  # FIXED_SHARE / MISS_SHARE: the early-crossover pair (issue #32) is FIXED_SHARE=0.1 MISS_SHARE=0.2 (accept
  # ~1.74 against 2.67: `python3 benchmarks/gpu/make_models.py mix --fixed-share 0.1 --miss-share 0.2`)
  say "models: the 8B-shaped pair whose drafts land (fixed share ${FIXED_SHARE:-0.5}, miss share ${MISS_SHARE:-0})"
  python3 benchmarks/gpu/make_models.py write "$WORK/models" --shape 8b --fixed-share "${FIXED_SHARE:-0.5}" \
    --miss-share "${MISS_SHARE:-0}" || exit 1
  st sglang-config --steps 3 --max-running-requests $MAX_RUNNING --out "$WORK/adaptive.json" >/dev/null || exit 1
  python3 -c 'import secrets; print("k" + secrets.token_urlsafe(24))' > "$WORK/admin_key"; chmod 600 "$WORK/admin_key"
  # Each server sizes its KV pool from the memory free when it loads: the EAGLE-3 one first (a third of the
  # card), the plain one once that pool is allocated (it then takes what --mem-fraction-static leaves it);
  # the two CUDA-graph captures overlap.
  # SKIP_EXTEND=1: SGLang's own SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND for the speculative server (a gated
  # batch then skips the draft model's KV extend; what that costs after re-enabling: docs/off-means-off.md)
  if [ "${SKIP_EXTEND:-0}" = 1 ]; then export SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1; say "spec server: draft extend skipped while gated"; fi
  start_spec
  if [ "$PLAIN" = 0 ]; then wait_for spec $SPEC_PORT "" || return 1; else
    wait_for spec $SPEC_PORT "KV Cache is allocated|Memory pool end|Capture cuda graph begin" || return 1
    say "spec: KV pool allocated; starting the plain server"
    start_server plain $PLAIN_PORT 0.62
    wait_for spec $SPEC_PORT "" && wait_for plain $PLAIN_PORT "" || return 1
  fi
  grep -E "spectower plugin" "$WORK/spec.log" | grep -v server_args= | head -2
}

start_spec() {  # the EAGLE-3 server with spectower's plugins; SPEC_ENV: "NAME=value ..." for it alone
  # (e.g. SPECTOWER_SEQ_LENS_MIRROR=0, SPECTOWER_GATED_DECODE=0: which of the plugin's hooks costs what)
  local -a env_args=()
  [ -n "${SPEC_ENV:-}" ] && read -r -a env_args <<< "$SPEC_ENV" && say "spec server with $SPEC_ENV"
  rm -rf "$WORK/policy-out"  # a new server: the policy runs and counters of the one before are not its own
  (  # a subshell: SPEC_ENV reaches this server only
    for kv in "${env_args[@]}"; do export "${kv?}"; done
    start_server spec $SPEC_PORT 0.35 --speculative-algorithm EAGLE3 \
      --speculative-draft-model-path "$WORK/models/draft" --speculative-num-steps 3 --speculative-eagle-topk 1 \
      --speculative-num-draft-tokens 4 --speculative-adaptive --speculative-adaptive-config "$WORK/adaptive.json"
  )
}

do_respec() {  # the speculative server alone again (SPEC_ENV for it), the plain port's server kept
  # A flashinfer relaunch takes ~80 s once the first launch has built its JIT kernels (2026-12-02). The
  # knob at max against the un-gated server on flashinfer read 0.91 at C=16 (stop 28); with
  # SPECTOWER_GATED_DECODE=0 it read 0.98: PHASES="ungated", then SPEC_ENV=... PHASES="respec abmax" per hook.
  [ -f "$WORK/spec.pid" ] || { say "respec: no speculative server of a launch here"; return 1; }
  kill -- -"$(cat "$WORK/spec.pid")" 2>/dev/null; sleep 8
  start_spec
  wait_for spec $SPEC_PORT "" || return 1
  grep -E "spectower (gated decode|seq-lens)" "$WORK/spec.log" | grep -v server_args= | head -3 | cut -c1-160
}

do_accept() {
  say "acceptance: greedy requests against what the construction says"
  # reported, not fatal: the measurements below are worth having either way
  python3 benchmarks/gpu/check_acceptance.py --server "$SPEC_URL" --plain "$PLAIN_URL" --out "$OUT/accept.json" \
    || say "acceptance differs from the construction (see above)"
}

do_gated() {
  say "gated: knob at 0 (every batch a one-token verify), then back on: tokens as constructed both ways"
  st control set --server "$SPEC_URL" --off --reason "off-means-off check" --as gpu-check --yes >/dev/null
  python3 benchmarks/gpu/check_acceptance.py --server "$SPEC_URL" --gated --out "$OUT/accept_gated.json" \
    || say "gated answers differ from the construction (see above)"
  st control set --server "$SPEC_URL" --on --reason "off-means-off check" --as gpu-check --yes >/dev/null
  python3 benchmarks/gpu/check_acceptance.py --server "$SPEC_URL" --out "$OUT/accept_back_on.json" \
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
st bench sweep --server "$SPEC_URL" --plain-server "$PLAIN_URL" --concurrency "$LEVELS" --modes "${MODES:-on,off}" \
  --duration-per-level "$SWEEP_SECONDS" --rounds "${ROUNDS:-2}" --warmup 4 --output-len "$SWEEP_OUTPUT_LEN" --input-len 64 --api generate \
  --tag "h200-sglang-0.5.17-$ATTN-8b-pair${MISS_SHARE:+-fixed${FIXED_SHARE:-0.5}-miss$MISS_SHARE}" --save --db "$DB" --profile-out "$OUT/profile.json" --as gpu-check \
  ${GPU_METRICS:+--gpu-metrics "$GPU_METRICS"} --json > "$OUT/sweep.json"
say "sweep exit $?"
cp "$OUT/sweep.json" "$WORK/sweep.json"  # the policy phases of a later call score against it
[ -f "$OUT/profile.json" ] && cp "$OUT/profile.json" "$WORK/profile.json"  # learn's warm start (WARM_PROFILE=sweep)
python3 - "$OUT/sweep.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(json.dumps({k: v for k, v in d.items() if k != "points"}, indent=1)[:4000])
PY
}

profile() {  # label url concurrency [activities JSON, default GPU only]
  local label=$1 url=$2 c=$3 activities=${4:-'["GPU"]'}
  # a folder of its own per profile: on 2026-12-02 a second C=64 profile landed beside the first and the
  # table read the first again
  rm -rf "${WORK:?}/prof/$label"
  touch "$PROFILED_MARK"
  st_bg bench load --server "$url" --pattern "steps:$c" --period 30s --duration 18s --output-len 256 --api generate \
    > "$WORK/load_$label.log" 2>&1
  local load=$!
  sleep 7
  curl -s -X POST -H "Authorization: Bearer $(cat "$WORK/admin_key")" -H 'content-type: application/json' \
    -d "{\"output_dir\": \"$WORK/prof/$label\", \"num_steps\": $PROF_STEPS, \"activities\": $activities, \"profile_prefix\": \"$label\"}" \
    "$url/start_profile" >/dev/null
  wait $load || { say "profile $label: its load failed (above)"; return 1; }
  for _ in $(seq 1 20); do ls "$WORK/prof/$label"/*.json* >/dev/null 2>&1 && break; sleep 1; done
}
do_profile() {
traces=()
for c in $PROF_LEVELS; do
  st control set --server "$SPEC_URL" --off --reason "off-means-off profile" --as gpu-check --yes >/dev/null
  profile "off-c$c" "$SPEC_URL" "$c" || return 1
  st control set --server "$SPEC_URL" --on --reason "off-means-off profile" --as gpu-check --yes >/dev/null
  profile "on-c$c" "$SPEC_URL" "$c" || return 1
  profile "plain-c$c" "$PLAIN_URL" "$c" || return 1
  traces+=("knob-off@C$c=$WORK/prof/off-c$c" "knob-on@C$c=$WORK/prof/on-c$c" "plain@C$c=$WORK/prof/plain-c$c")
  say "profiled C=$c"
done
st control release --server "$SPEC_URL" --reason "off-means-off profile done" --as gpu-check >/dev/null
python3 benchmarks/gpu/profile_table.py --steps $PROF_STEPS --json "$OUT/kernels.json" "${traces[@]}"
# the GPU-only traces too (a few MB): their kernels' timestamps hold the wall time and idle share per step
# (this call's levels only: the folders of earlier calls' profiles stay in $WORK/prof)
mkdir -p "$OUT/traces"
for c in $PROF_LEVELS; do cp "$WORK"/prof/{off,on,plain}-c"$c"/*.json.gz "$OUT/traces/" 2>/dev/null; done
}

do_timeline() {  # CPU + GPU traces: where the GPU idles in a gated step against a plain decode step
traces=()
for c in ${TIMELINE_LEVELS:-1 64}; do
  st control set --server "$SPEC_URL" --off --reason "off-means-off timeline" --as gpu-check --yes >/dev/null
  profile "t-off-c$c" "$SPEC_URL" "$c" '["CPU", "GPU"]' || return 1
  st control set --server "$SPEC_URL" --on --reason "off-means-off timeline" --as gpu-check --yes >/dev/null
  profile "t-on-c$c" "$SPEC_URL" "$c" '["CPU", "GPU"]' || return 1
  profile "t-plain-c$c" "$PLAIN_URL" "$c" '["CPU", "GPU"]' || return 1
  traces+=("knob-off@C$c=$WORK/prof/t-off-c$c" "knob-on@C$c=$WORK/prof/t-on-c$c" "plain@C$c=$WORK/prof/t-plain-c$c")
  say "timeline C=$c"
done
st control release --server "$SPEC_URL" --reason "off-means-off timeline done" --as gpu-check >/dev/null
python3 benchmarks/gpu/profile_table.py --timeline --steps $PROF_STEPS --json "$OUT/timeline.json" "${traces[@]}"
mkdir -p "$OUT/traces"
for c in ${TIMELINE_LEVELS:-1 64}; do cp "$WORK"/prof/t-{off,on,plain}-c"$c"/*.json.gz "$OUT/traces/" 2>/dev/null; done
ls -la "$OUT/traces" | tail -8
}

do_reentry() {  # knob at 0 under load (the extend skipped), then on: the drain, then drafting at full accept
  say "re-entry: an operator's off under 16 clients, then on; /server_info every 2 s"
  st control set --server "$SPEC_URL" --off --hold 10m --reason "re-entry drill" --as gpu-check --yes >/dev/null
  st_bg bench load --server "$SPEC_URL" --pattern steps:16 --period 60s --duration 44s --output-len 512 --input-len 64 \
    --api generate --status-every 2s > "$OUT/load-reentry.log" 2>&1
  local load=$! i
  sleep 14
  for i in $(seq -w 1 14); do
    [ "$i" = 04 ] && st control set --server "$SPEC_URL" --on --hold 10m --reason "re-entry drill" --as gpu-check --yes >/dev/null
    curl -fsS "$SPEC_URL/server_info" > "$WORK/reentry_$i.json"; sleep 2
  done
  wait $load
  st control release --server "$SPEC_URL" --reason "re-entry drill done" --as gpu-check >/dev/null
  python3 - "$WORK"/reentry_*.json <<'PY' | tee "$OUT/reentry.txt"
import json, sys
print("snapshot  knob  holed  skipped  drained  cut_short  accept_length")
for path in sys.argv[1:]:
    rank = json.load(open(path))["internal_states"][0]
    block = rank.get("spectower", {})
    skip = block.get("gated_decode") or {}
    print(f"{path[-7:-5]:>8}  {block.get('spec_max_bs')!s:>4}  {skip.get('holed_requests')!s:>5}  "
          f"{skip.get('batches_skipped')!s:>7}  {skip.get('batches_drained')!s:>7}  {skip.get('drains_cut_short')!s:>9}  "
          f"{rank.get('avg_spec_accept_length')}")
PY
}

start_ungated() {  # K: an un-gated EAGLE-3 server at K steps (no adaptive config, no spectower plugin)
  # It takes the plain server's port and memory (a later launch phase brings the plain one back).
  local k=$1
  # UNGATED_ADAPTIVE=1: with the launch's adaptive config too (still no plugin), so a loss at knob max splits
  # into SGLang's adaptive runtime and spectower's hooks (flashinfer read 0.91 at C=16 on 2026-12-02)
  local -a adaptive=()
  [ "${UNGATED_ADAPTIVE:-0}" = 1 ] && adaptive=(--speculative-adaptive --speculative-adaptive-config "$WORK/adaptive.json")
  kill -- -"$(cat "$WORK/plain.pid")" 2>/dev/null; sleep 5; echo "eagle-$k" > "$WORK/plain.kind"
  # SGLANG_PLUGINS is SGLang's allow-list of plugin names: one that names no plugin loads none
  SGLANG_PLUGINS=none start_server plain $PLAIN_PORT 0.62 --speculative-algorithm EAGLE3 \
    --speculative-draft-model-path "$WORK/models/draft" --speculative-num-steps "$k" --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens $((k + 1)) "${adaptive[@]}"
  [ ${#adaptive[@]} -gt 0 ] && say "un-gated server with the launch's adaptive config (no plugin)"
  wait_for plain $PLAIN_PORT "" || return 1
  grep -q "Loaded plugin spectower" "$WORK/plain.log" && { say "the un-gated server loaded a spectower plugin"; return 1; }
  return 0
}

ab_at_max() {  # LEVELS OUT WHAT: the gated server at knob max against the un-gated one, in the same rounds
  st control set --server "$SPEC_URL" --max-bs $MAX_RUNNING --reason "knob at max vs $3" --as gpu-check --yes >/dev/null
  python3 benchmarks/gpu/knob_max_ab.py --gated "$SPEC_URL" --ungated "$PLAIN_URL" --concurrency "$1" --out "$2" \
    --rounds "${AB_ROUNDS:-2}"
  st control release --server "$SPEC_URL" --reason "knob at max vs $3 done" --as gpu-check >/dev/null
}

do_ungated() {  # the knob at max against an un-gated EAGLE-3 server at the launch's 3 steps
  say "un-gated EAGLE-3 server in place of the plain one; then the knob at max against it (want >= 0.97)"
  start_ungated 3 || return 1
  do_abmax
}

do_abmax() {  # the knob at max against the un-gated server already on the plain port (after `ungated`)
  [ "$(cat "$WORK/plain.kind" 2>/dev/null)" = eagle-3 ] || { say "abmax: no un-gated server (run ungated first)"; return 1; }
  ab_at_max "${AB_LEVELS:-1,16,64}" "$OUT/knob_max_vs_ungated.json" "un-gated${SPEC_ENV:+ ($SPEC_ENV)}"
}

explore_window() {  # the speculative server's exploration block per rank (window phase, windows, cuts)
  curl -fsS "$SPEC_URL/server_info" 2>/dev/null | python3 -P -c '
import json, sys
for rank in json.load(sys.stdin).get("internal_states", []):
    explore = (rank.get("spectower") or {}).get("explore") or {}
    print("explore:", json.dumps({k: explore.get(k) for k in ("share", "period", "batches", "window")}))
' || say "explore: /server_info not readable"
}

off_vs_plain() {  # OUT LABEL: the speculative server's knob as set now against the plain server, mixed lengths
  # OFF_INPUT_LEN: the prompts' tokens (64 by default; 1024 puts the draft's prefill in the measure, plugin 0.4.9)
  python3 benchmarks/gpu/knob_max_ab.py --gated "$SPEC_URL" --ungated "$PLAIN_URL" --concurrency "${OFF_LEVELS:-1,4,16,32,64}" \
    --rounds "${AB_ROUNDS:-3}" --seconds "${OFF_SECONDS:-8}" --output-len "${OFF_OUTPUT_LEN:-64-448}" --out "$1" \
    --input-len "${OFF_INPUT_LEN:-64}" --label "$2 / plain"
  # each round as the servers' own decode lines saw it (steps/s, batch, drafting): a low round's why
  python3 benchmarks/gpu/round_steps.py "$1" --log gated="$WORK/spec.log" --log ungated="$WORK/plain.log" || true
}

do_policyoff() {  # issue #32: the knob at 0 written by a policy (no lock: exploring) and by an operator (locked)
  [ "$(cat "$WORK/plain.kind" 2>/dev/null)" = plain ] || { say "policyoff: no plain server (run launch)"; return 1; }
  local tag=${OFF_TAG:-windows}
  if [ "${OFF_POLICY:-1}" = 1 ]; then
    say "a policy's 0 (writer 2, no lock, exploring at the default share; $tag) against the plain server"
    curl -s -X POST -H "Authorization: Bearer $(cat "$WORK/admin_key")" -H 'content-type: application/json' \
      -d '{"server_args": {"spectower_spec_max_bs": 0, "spectower_writer": 2}}' "$SPEC_URL/set_internal_state"
    echo " <- a policy's write of 0 (want true)"
    off_vs_plain "$OUT/policy_off_vs_plain-$tag.json" "a policy's 0 ($tag)"
    explore_window
  fi
  if [ "${OFF_OPERATOR:-1}" = 1 ]; then
    say "an operator's 0 (a manual lock: nothing explores) against the plain server"
    st control set --server "$SPEC_URL" --off --reason "operator's off vs plain" --as gpu-check --yes >/dev/null
    off_vs_plain "$OUT/operator_off_vs_plain${OFF_TAG:+-$OFF_TAG}.json" "an operator's 0${OFF_TAG:+ ($OFF_TAG)}"
    st control release --server "$SPEC_URL" --reason "operator's off vs plain done" --as gpu-check >/dev/null
  fi
}

do_steps() {  # a middle step count (issue #14): un-gated EAGLE-3 servers at K steps against the launch at max
  # The gated server (3 steps, from `launch`) at knob max and a K-step server on the plain port, measured in
  # the same rounds; benchmarks/gpu/steps_table.py ties each K to the sweep's curves through that ratio.
  curl -fsS "$SPEC_URL/health" >/dev/null 2>&1 || { say "steps: the gated server is not up (run launch first)"; return 1; }
  local k
  for k in ${STEPS_LIST:-1 2}; do
    say "steps: un-gated EAGLE-3 at $k steps ($((k + 1)) draft tokens) in place of the plain server"
    start_ungated "$k" || return 1
    # only the one field: /server_info also carries the admin key
    curl -fsS "$PLAIN_URL/server_info" | python3 -c 'import json, sys; print("un-gated server steps:",
      json.load(sys.stdin).get("speculative_num_steps"))'
    ab_at_max "${STEPS_LEVELS:-$LEVELS}" "$OUT/steps-$k.json" "$k steps"
    [ -f "$OUT/steps-$k.json" ] && cp "$OUT/steps-$k.json" "$WORK/steps-$k.json"  # a later call's table reads it
  done
  # the table over every K measured on this machine so far, against the sweep of this launch (if one ran)
  local files=() f n
  for f in "$WORK"/steps-*.json; do  # K=1 and K=2: the middle counts of the 3-step launch
    n=$(basename "$f" .json); n=${n#steps-}
    case $n in 1|2) files+=(--steps "$n=$f") ;; esac
  done
  if [ -f "$WORK/sweep.json" ] && [ ${#files[@]} -gt 0 ]; then
    cp "$WORK/sweep.json" "$OUT/sweep.json"
    python3 benchmarks/gpu/steps_table.py --sweep "$WORK/sweep.json" --launch-steps 3 "${files[@]}" --json "$OUT/steps_table.json" \
      || say "steps table: see above"
  else say "steps: no sweep of this launch on the machine ($WORK/sweep.json): run the table where the sweep is"; fi
}

do_policy() {  # the same day-shaped load under each of $POLICIES, in the background (see do_wait)
  # POLICIES: learn, on (always on), off (always off), threshold:N; LOAD_SECONDS per policy (default 600), or
  # an entry's own after =, e.g. threshold:24=280;
  # POLICY_START: the knob a policy (learn, threshold:N) starts from (default: wherever it is).
  # Results in $OUT: policy.db (collector + policy decisions + audit), load-<policy>.log (5 s status
  # lines: target C and tok/s), auto-<policy>.log; benchmarks/gpu/policy_table.py turns them into ratios.
  # The runs outlive this device call and $OUT is emptied for the next one: they write to $WORK/policy-out,
  # and every do_wait copies what is there into that call's $OUT.
  # One database and folder for every policy phase of a launch (start_spec clears them): a later call's learn
  # warm-starts from the server's counters of the earlier runs, and the tables set every run against the others
  rm -f "$WORK/policy.done" && mkdir -p "$WORK/policy-out"
  # threshold:sweep: the threshold at this launch's sweep (its best ceiling); WARM_PROFILE=sweep: its profile
  if [[ " $POLICIES $WARM_PROFILE " == *sweep* ]]; then
    [ -f "$WORK/sweep.json" ] || { say "policy: threshold:sweep / WARM_PROFILE=sweep need a sweep of this launch"; return 1; }
    local best
    best=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["best_max_bs"])' "$WORK/sweep.json") || return 1
    POLICIES=${POLICIES//threshold:sweep/threshold:$best}
    [ "$WARM_PROFILE" = sweep ] && WARM_PROFILE=$WORK/profile.json
    say "the sweep's best ceiling: $best; policies: $POLICIES; warm profile: ${WARM_PROFILE:-none}"
  fi
  OUT=$WORK/policy-out DB=sqlite:///$WORK/policy-out/policy.db setsid bash -c '
    run_one() {
      # an entry may end in =SECONDS, its own load length (threshold:24=280: windows at the default cycle
      # come about every 90 s at 48 requests, where the locks need a minute each), and in @PATTERN, its own
      # load pattern (off@steps:32 threshold:64=120@steps:32: two levels in one call, when one call is all
      # a session may get)
      local entry=${1%%@*} pattern=$LOAD_PATTERN apid=""
      [[ $1 == *@* ]] && pattern=${1#*@}
      local pol=${entry%%=*} secs=$LOAD_SECONDS
      [[ $entry == *=* ]] && secs=${entry#*=}
      local label=${pol//:/-}
      if [ "$pol" = freeze-gc ]; then  # not a policy: SGLang'"'"'s /freeze_gc (tokenizer manager and scheduler)
        # between two runs: the launcher'"'"'s full collections paused every output (2026-12-05); the product'"'"'s
        # command reads the freeze back and audits it; where it cannot (a plugin before 0.4.8), plain curl
        echo "[$(date +%T)] freeze-gc"
        st control freeze-gc --server "$SPEC_URL" --reason "policy runs: freeze-gc" --as gpu-check --yes \
            --db "$DB" \
          || echo "[$(date +%T)] freeze-gc by curl: $(curl -s -X POST -H "Authorization: Bearer $(cat \
            "$WORK/admin_key")" "$SPEC_URL/freeze_gc")"
        return
      fi
      echo "[$(date +%T)] policy $pol (${secs}s, $pattern)"
      label=$(run_label "$OUT" "$label")  # a policy run again (alternating order, or a later call): all kept
      case $pol in
        on) st control set --server "$SPEC_URL" --on --reason "policy run: always on" --as gpu-check --yes --db "$DB" ;;
        off) st control set --server "$SPEC_URL" --off --reason "policy run: always off" --as gpu-check --yes --db "$DB" ;;
        off-polled)  # always off, locked, while a policy reads /server_info every 2 s as learn does (paused by
          # the lock): what a policy'"'"'s reads cost the scheduler, apart from being unlocked (2026-12-05c)
          st control set --server "$SPEC_URL" --off --reason "policy run: always off, polled" --as gpu-check --yes --db "$DB"
          st_bg control auto --server "$SPEC_URL" --policy threshold:0 --interval 2s --db "$DB" > "$OUT/auto-$label.log" 2>&1
          apid=$! ;;
        *) if [ -n "${POLICY_START:-}" ]; then  # where the policy starts from (stop 24 started learn at 0)
             st control set --server "$SPEC_URL" --max-bs "$POLICY_START" --reason "policy run: start" --as gpu-check \
               --yes --db "$DB"
           fi
           st control release --server "$SPEC_URL" --reason "policy run: $pol" --as gpu-check --db "$DB"
           # learn starts warm from WARM_PROFILE (a measured profile of this stack) when one is given
           local warm=()
           if [ "$pol" = learn ] && [ -n "${WARM_PROFILE:-}" ]; then warm=(--warm-profile "$WARM_PROFILE"); fi
           # GPU_METRICS: a dcgm-exporter URL where NVML sees no GPU (a rehearsal on `sim serve --gpu-metrics-port`)
           if [ "$pol" = learn ] && [ -n "${GPU_METRICS:-}" ]; then warm+=(--gpu-metrics "$GPU_METRICS"); fi
           # LEARN_ARGS: more flags for learn, e.g. "--dwell 60s" (its 5-min default outlasts a 270-s day)
           if [ "$pol" = learn ] && [ -n "${LEARN_ARGS:-}" ]; then read -r -a more <<< "$LEARN_ARGS"; warm+=("${more[@]}"); fi
           st_bg control auto --server "$SPEC_URL" --policy "$pol" --interval 2s --db "$DB" "${warm[@]}" \
             > "$OUT/auto-$label.log" 2>&1
           apid=$!
           # the load starts once the policy has acted (its first tick, a set or a hold; 15 s at most), so the
           # run'"'"'s steps run under its own ceiling: until 2026-12-06 the load'"'"'s fresh batch drafted its first
           # 2-3 s under the ceiling before (47 steps at 48 under always on'"'"'s, which a run'"'"'s counters file
           # counted as its own, data/gpu-runs/h100-8b-pair-triton-request-mix-2026-12-06)
           local tries=0
           until grep -qE "^[0-9]{2}:[0-9]{2}:[0-9]{2} " "$OUT/auto-$label.log" 2>/dev/null || [ $tries -ge 30 ]; do
             sleep 0.5; tries=$((tries + 1))
           done ;;
      esac
      if [ -n "${REPLAY_TRACE:-}" ]; then  # open loop: the trace'"'"'s arrivals of LOAD_SECONDS, then the drain
        st bench replay --server "$SPEC_URL" --trace "$REPLAY_TRACE" --speedup "$REPLAY_SPEEDUP" \
          --rate-scale "$REPLAY_RATE_SCALE" --duration "${secs}s" --api generate --save --db "$DB" \
          --tag "replay-$label" --json > "$OUT/replay-$label.json" 2> "$OUT/load-$label.log"
      else
        st bench load --server "$SPEC_URL" --pattern "$pattern" --period "${LOAD_PERIOD:-$secs}s" --duration "${secs}s" \
          --max-concurrency 64 --output-len "$POLICY_OUTPUT_LEN" --input-len 64 --api generate --status-every 5s \
          > "$OUT/load-$label.log" 2>&1
      fi
      if [ -n "$apid" ]; then kill -TERM $apid; wait $apid; fi
      # the plugin'"'"'s exploration report after the run (windows, parts ended by time, the stream'"'"'s limit):
      # only that block of /server_info, which also carries the admin key
      curl -fsS "$SPEC_URL/server_info" | python3 -P -c '"'"'
import json, sys
info = json.load(sys.stdin)
print(json.dumps([(s.get("spectower") or {}).get("explore") for s in info.get("internal_states", [])]))
'"'"' > "$OUT/explore-$label.json" || echo "explore report of $label not read" >&2
      # and the scheduler'"'"'s output stalls (plugin 0.4.7), which replay_table.py sets against the run'"'"'s TTFT tail,
      # and the off path'"'"'s counts (skipped extends and prefills, drains: off_path_runs.py), and the step
      # counters (what they counted and lost against the loop'"'"'s decode batches: counted_runs.py), each rank'"'"'s
      curl -fsS "$SPEC_URL/server_info" | python3 -P -c '"'"'
import json, sys
ranks = [s.get("spectower") or {} for s in json.load(sys.stdin).get("internal_states", [])]
for path, key in ((sys.argv[1], "loop"), (sys.argv[2], "gated_decode"), (sys.argv[3], "counters")):
    with open(path, "w") as out:
        out.write(json.dumps([block.get(key) for block in ranks]) + "\n")
'"'"' "$OUT/stalls-$label.json" "$OUT/offpath-$label.json" "$OUT/counters-$label.json" \
        || echo "stall, off-path and counter reports of $label not read" >&2
      st control release --server "$SPEC_URL" --reason "policy run $pol done" --as gpu-check --db "$DB"
    }
    st_bg collect --server "$SPEC_URL" --gpu nvml --interval 1s --db "$DB" > "$WORK/collect.log" 2>&1
    cpid=$!
    for pol in $POLICIES; do run_one "$pol"; done
    kill -TERM $cpid; wait $cpid
    touch "$WORK/policy.done"
  ' >> "$WORK/policy-out/policy.log" 2>&1 &
  say "policy runs started in the background: $POLICIES (${LOAD_SECONDS}s each, or an entry's =SECONDS)"
}
export -f st st_bg curl run_label  # for the background runs: curl keeps its deadline and size cap (above)
# POLICY_OUTPUT_LEN: mixed lengths by default (issue #32: one length finishes in waves); WARM_PROFILE: see above
# (or "sweep": this launch's sweep's profile), POLICIES may name threshold:sweep (the sweep's best ceiling)
# POLICIES may hold off-polled: always off (locked) while `control auto` reads /server_info every 2 s, held by
# the lock (its reads apart from being unlocked); and freeze-gc, not a policy: `spectower control freeze-gc` (SGLang's /freeze_gc, read back,
# audited) on the spec server; put it first: the launcher's full collections pause every output (2026-12-05)
# REPLAY_TRACE (a trace CSV in the repo): each policy under the trace open-loop instead of the day load
# (`bench replay --speedup REPLAY_SPEEDUP --rate-scale REPLAY_RATE_SCALE --duration LOAD_SECONDS`; scored by
# benchmarks/gpu/replay_table.py: goodput and p99 TTFT against the best fixed policy)
# LOAD_PATTERN (default day): bench load's --pattern, e.g. steps:16,48,64 with LOAD_PERIOD (s) for steady
# levels per bin, so explore_lean.py --runs-from-db sets explored against steady rates (issue #32, item 2)
# (an entry's own after @: POLICIES="off@steps:16 threshold:64=120@steps:32")
export SPEC_URL WORK POLICIES=${POLICIES:-learn on off} LOAD_SECONDS=${LOAD_SECONDS:-600} LOAD_PATTERN=${LOAD_PATTERN:-day} LOAD_PERIOD=${LOAD_PERIOD:-} \
  POLICY_OUTPUT_LEN=${POLICY_OUTPUT_LEN:-64-448} WARM_PROFILE=${WARM_PROFILE:-} REPLAY_TRACE=${REPLAY_TRACE:-} LEARN_ARGS=${LEARN_ARGS:-} \
  REPLAY_SPEEDUP=${REPLAY_SPEEDUP:-3} REPLAY_RATE_SCALE=${REPLAY_RATE_SCALE:-1} GPU_METRICS=${GPU_METRICS:-}

do_wait() {  # until the background policy runs finish, at most WAIT_SECONDS (a device call lasts <= 600 s)
  local until=$(( $(date +%s) + ${WAIT_SECONDS:-560} ))  # WAIT_UNTIL (epoch seconds) may end it sooner
  [ -n "${WAIT_UNTIL:-}" ] && [ "$WAIT_UNTIL" -lt "$until" ] && until=$WAIT_UNTIL
  while [ ! -f "$WORK/policy.done" ] && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
  tail -3 "$WORK/policy-out/policy.log"
  # the database is copied whole only once the collector has stopped (its -wal would be missing otherwise)
  cp "$WORK"/policy-out/*.log "$OUT"/
  cp "$WORK"/policy-out/*.json "$OUT"/ 2>/dev/null  # replay-<policy>.json (REPLAY_TRACE)
  if [ -f "$WORK/policy.done" ]; then
    cp "$WORK/policy-out/policy.db" "$OUT"/
    say "policy runs done"
    # the score needs a sweep of the same servers; a launch that ran none (2026-12-03: always on after
    # the knob-at-max calls) still hands back its runs, to be scored against a sweep saved elsewhere
    local sweep=${SWEEP_JSON:-$WORK/sweep.json}
    if compgen -G "$OUT/replay-*.json" >/dev/null; then python3 benchmarks/gpu/replay_table.py --block "${REPLAY_BLOCK_S:-15}" "$OUT"/replay-*.json
      # each run's delivered output against always off's over time (2026-12-05c: a 1 % lag, a 43 % longer tail)
      if [ -f "$OUT/replay-off.json" ]; then python3 benchmarks/gpu/replay_lag.py "$OUT"/replay-*.json || true; fi
      # how full each run kept the KV pool (2026-12-05c, an H100 beside a plain server: 0.99 at every run's peaks)
      [ -f "$WORK/spec.log" ] && { python3 benchmarks/gpu/kv_pressure.py --server-log "$WORK/spec.log" "$OUT"/replay-*.json || true; }
      # what exploring cost each run in time (drafting explored above its ceiling), from the runs' own counters
      { python3 benchmarks/gpu/explore_lean.py --db "$WORK/policy-out/policy.db" --runs-from-db \
        --min-steps 30 | sed -n '/^drafting explored/,$p' || true; }
    else
      # learn alternated with a threshold (the Ready rows' "learn threshold:sweep learn threshold:sweep"): each
      # learn run against the same repeat of the first threshold run, their blocks pooled (policy_table --pairs)
      local pairs=() thr
      thr=$(find "$OUT" -maxdepth 1 -name 'load-threshold-*.log' | sed 's|.*/load-||; s|\.log$||' \
        | grep -E '^threshold-[0-9]+$' | sort -t- -k2 -n | head -1)
      if [ -f "$OUT/load-learn.log" ] && [ -n "$thr" ]; then pairs=(--pairs "learn=$thr"); fi
      if [ -f "$sweep" ]; then python3 benchmarks/gpu/policy_table.py --sweep "$sweep" "$OUT"/load-*.log ${pairs[@]+"${pairs[@]}"}
      else say "no sweep at $sweep to score against: python3 benchmarks/gpu/policy_table.py --sweep SWEEP.json load-*.log"; fi
      # explored against steady rates per bin, and what each ceiling made of each bin (issue #32, item 2),
      # the closed-loop runs found from the audit (LOAD_PATTERN=steps:...: steady levels)
      # and each run's client-side tok/s beside its counters' (the lead learn decides on: 2026-12-06)
      # its --json carries each explored cell's intervals: lean_pool.py pools the launches of one card
      python3 benchmarks/gpu/explore_lean.py --db "$WORK/policy-out/policy.db" --runs-from-db --min-steps 30 \
        --load-logs "$OUT" --json "$OUT/lean.json" || true
      # item 2 a level a session: this launch's cells pooled with earlier launches' of the same card
      if [ -n "${LEAN_POOL:-}" ] && [ -f "$OUT/lean.json" ]; then
        # shellcheck disable=SC2086  # a list of paths, split on purpose
        python3 benchmarks/gpu/lean_pool.py $LEAN_POOL "$OUT/lean.json" || true
      fi
    fi
    # each run's share of the scheduler loop (2026-12-05c: taking in requests cost 3x after always off)
    if compgen -G "$OUT/stalls-*.json" >/dev/null; then python3 benchmarks/gpu/loop_phases.py "$OUT"/stalls-*.json || true; fi
    if compgen -G "$OUT/offpath-*.json" >/dev/null; then python3 benchmarks/gpu/off_path_runs.py "$OUT"/offpath-*.json || true; fi
    if compgen -G "$OUT/counters-*.json" >/dev/null; then python3 benchmarks/gpu/counted_runs.py "$OUT"/counters-*.json || true; fi
  else
    # a consistent copy while the collector still writes (SQLite's online backup API, safe beside a live
    # writer and its -wal): a machine taken back before the runs end (2026-12-04: learn's counters went with
    # it) still leaves the counters and control events of the runs so far
    [ -f "$WORK/policy-out/policy.db" ] && python3 -c 'import sqlite3, sys
src, dst = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
src.backup(dst)
dst.close()' "$WORK/policy-out/policy.db" "$OUT/policy-partial.db" || say "no partial copy of policy.db"
    say "policy runs still going"
  fi
}

for phase in $PHASES; do
  case $phase in sweep|reentry|policy|ungated|steps|abmax|policyoff) throughput_phase_ok "$phase" || exit 1 ;; esac
  "do_$phase" || { say "$phase failed"; exit 1; }
done
grep -E "spectower" "$WORK/spec.log" | grep -v server_args= | tail -3
# The plugin's own time in its decode hooks against the decode time its counters measured (issue #14: < 1 %
# of a decode step). Only these figures are printed: /server_info also carries the admin key.
curl -fsS "$SPEC_URL/server_info" 2>/dev/null | python3 -P benchmarks/gpu/call_summary.py \
  || say "plugin hooks: /server_info not readable"
# which CUDA graphs each adaptive state captured (the 0-step state's draft extend should be 1 token wide)
grep -E "Capture draft extend CUDA graph begin|Built adaptive runtime state" "$WORK/spec.log" | cut -c1-220
# SGLang's tokenizer manager's long garbage collections (--gc-warning-threshold-secs GC_WARN_S), the newest few
for name in spec plain; do
  [ -f "$WORK/$name.log" ] || continue
  say "$name: $(grep -c 'LONG GARBAGE COLLECTION DETECTED' "$WORK/$name.log") tokenizer-manager collections >= ${GC_WARN_S:-0.05} s"
  grep 'LONG GARBAGE COLLECTION DETECTED' "$WORK/$name.log" | tail -5 | cut -c1-140
done
# plugin 0.4.7's watch threads: each process's Python held >= 0.25 s (the launcher's HTTP server and tokenizer
# manager, and each scheduler), with UTC times, to set against a replay's tail where the scheduler saw no stall
if [ -f "$WORK/spec.log" ]; then
  say "spec: $(grep -c 'spectower watch:' "$WORK/spec.log") late wakes of the plugin's watch threads (>= 0.25 s)"
  grep 'spectower watch:' "$WORK/spec.log" | tail -10 | cut -c1-200
fi
# SGLang's own step changes (its acceptance EMA, not the knob): at knob max against an un-gated server each
# one is a stretch of batches that did not draft
for name in spec plain; do
  [ -f "$WORK/$name.log" ] && say "$name: $(grep -c 'Adaptive spec params updated' "$WORK/$name.log") EMA step changes," \
    "$(grep -c 'Switch adaptive runtime state' "$WORK/$name.log") runtime-state switches since its launch"
done
# the servers' logs without SGLang's server_args line (it holds the admin key): the last 400 lines to read, and
# the whole log compressed, so a stall a replay's tail shows (replay_table.py's stretches: every policy paused
# 0.6-1.35 s a few times on 2026-12-04) can be looked up by its time afterwards
for name in spec plain; do
  [ -f "$WORK/$name.log" ] || continue
  sed '/server_args=/d' "$WORK/$name.log" | tail -400 > "$OUT/$name-server.log"
  sed '/server_args=/d' "$WORK/$name.log" | gzip -6 > "$OUT/$name-server.log.gz"
done
say "done: $PHASES"
# The device tool hands back at most 8 files a call: past OUT_MAX_FILES (8), everything but this log goes back
# as one archive (tar -xzf out.tgz)
bash benchmarks/gpu/pack_out.sh | sed "s/^/[$(( $(date +%s) - t0 ))s] /"
