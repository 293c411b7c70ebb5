#!/usr/bin/env bash
# The whole real-GPU check in one command, on a machine with one NVIDIA GPU, Python 3.12 and torch 2.11
# (the lent H200): a real SGLang 0.5.17 + EAGLE-3 server with spectower's own plugin, driven by spectower's
# knob client, collector (NVML), benchmark sweep and learn policy. Run from the repo root with the bundle
# from benchmarks/gpu/build_bundle.sh at benchmarks/gpu/bundle/sglang-0.5.17-py312.tar.xz. Results land in $OUT (default ./out):
#   check.log     everything below, step by step
#   server.log    SGLang's log (the plugin's hook line among the first lines)
#   summary.json  control read-backs, sweep result, learn decisions, hover/override-log figures
#   collect.db    the collector's + sweep's spectower database (SQLite), to open with `spectower console`
#   profile.json  the sweep as a replayable performance profile
# Phase lengths can be shortened with SWEEP_SECONDS / LEARN_SECONDS / HOVER_SECONDS.
set -uo pipefail
# Every HTTP read here has a total deadline and a size cap (a server that hangs mid-answer must not eat the
# device call): 120 s covers /start_profile, which answers once its steps ran; 64 MiB, any answer here.
curl() { command curl --max-time "${CURL_MAX_S:-120}" --max-filesize 67108864 "$@"; }
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/check.log") 2>&1
REPO=$PWD
WORK=/tmp/spectower-gpu
SITE=$WORK/site
PORT=${PORT:-30000}
URL=http://127.0.0.1:$PORT
DB=sqlite:///$OUT/collect.db
SWEEP_SECONDS=${SWEEP_SECONDS:-6}
LEARN_SECONDS=${LEARN_SECONDS:-100}
HOVER_SECONDS=${HOVER_SECONDS:-90}
TP=${TP:-1}
SPEC_STEPS=3
MAX_RUNNING=48
t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # st, st_bg
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 3
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ -n "${SERVER_PID:-}" ] && { kill -TERM -- -"$SERVER_PID" 2>/dev/null; sleep 2; kill -KILL -- -"$SERVER_PID" 2>/dev/null; }
  # SGLang's server_args line holds the admin key: it stays on the GPU machine, as does the key file
  sed '/server_args=/d' "$WORK/server.log" > "$OUT/server.log" 2>/dev/null
  # every intermediate answer (read-backs, sweep JSON, hover server_info, policy log) in one file
  tar -C "$WORK" -czf "$OUT/work.tgz" --exclude=site --exclude=models --exclude=admin_key \
    --exclude=server.log . 2>/dev/null
}
trap cleanup EXIT
trap 'exit 143' TERM INT

say "unpacking the SGLang 0.5.17 bundle"
rm -rf "$WORK" && mkdir -p "$SITE"
tar -C "$SITE" -xJf benchmarks/gpu/bundle/sglang-0.5.17-py312.tar.xz || { say "no bundle: run benchmarks/gpu/build_bundle.sh here first"; exit 2; }
# spectower's entry point for SGLang's plugin loader (group sglang.srt.plugins), the code from this checkout
# laid out as installed (spectower.<folder>, links into the checkout)
python3 tests/namespace_tree.py --dist-info "$SITE" >/dev/null
export PYTHONPATH=$SITE
export PYTHONUNBUFFERED=1
# The bundle's deep_gemm is an empty stand-in (imported by the draft CUDA-graph capture, never called):
# keep SGLang's JIT DeepGEMM path off so it does not reach for the real package's submodules.
export SGLANG_ENABLE_JIT_DEEPGEMM=0
# Several GPUs: NVLink multicast stays off (it can take a shared host's GPUs out of service).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -c 'import sglang, torch, pynvml; print("sglang", sglang.__version__, "torch", torch.__version__)'
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

say "models (the constructed 8B-shaped pair, benchmarks/gpu/README.md) and spectower's adaptive config"
python3 benchmarks/gpu/make_models.py write "$WORK/models" --shape 8b --fixed-share "${FIXED_SHARE:-0.5}" || exit 1
# what a load of bench prompts (input ids 10..999, 256 new tokens) should show as accept length
python3 benchmarks/gpu/make_models.py mix --shape 8b --fixed-share "${FIXED_SHARE:-0.5}" --ids 10:1000 --max-new-tokens 256
st sglang-config --steps $SPEC_STEPS --max-running-requests $MAX_RUNNING --out "$WORK/adaptive.json"
cat "$WORK/adaptive.json"; echo
python3 -c 'import secrets; print(secrets.token_urlsafe(24))' > "$WORK/admin_key" && chmod 600 "$WORK/admin_key"
export SPECTOWER_ADMIN_KEY_FILE=$WORK/admin_key

say "launching SGLang (the admin key goes through SGLang's own flag, from the file)"
setsid python3 -P -m sglang.launch_server \
  --model-path "$WORK/models/target" --tokenizer-path "$WORK/models/target" \
  --speculative-algorithm EAGLE3 --speculative-draft-model-path "$WORK/models/draft" \
  --speculative-num-steps $SPEC_STEPS --speculative-eagle-topk 1 --speculative-num-draft-tokens $((SPEC_STEPS + 1)) \
  --speculative-adaptive --speculative-adaptive-config "$WORK/adaptive.json" \
  --attention-backend triton --sampling-backend pytorch --cuda-graph-max-bs-decode 16 \
  --mem-fraction-static 0.25 --max-running-requests $MAX_RUNNING --enable-metrics --decode-log-interval 10 \
  --tp-size "$TP" $( [ "$TP" -gt 1 ] && echo --enable-metrics-for-all-schedulers ) \
  --host 127.0.0.1 --port $PORT --admin-api-key "$(cat "$WORK/admin_key")" > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 240); do
  curl -fsS "$URL/health" >/dev/null 2>&1 && break
  kill -0 $SERVER_PID 2>/dev/null || { say "SGLang exited"; tail -50 "$WORK/server.log"; exit 1; }
  sleep 1
done
curl -fsS "$URL/health" >/dev/null || { say "SGLang not healthy"; tail -50 "$WORK/server.log"; exit 1; }
say "SGLang healthy"
# the plugin's own lines only: SGLang's server_args line also names spectower's paths, and holds the admin key
grep -E "spectower plugin|spectower:" "$WORK/server.log" | grep -v "server_args=" | head -5

say "knob: get, then off / max-bs 4 / on, each confirmed by read-back"
st control get --server "$URL" --json > "$WORK/get.json"; cat "$WORK/get.json"
for flag in "--off" "--max-bs 4" "--on"; do
  # shellcheck disable=SC2086
  st control set --server "$URL" $flag --reason "gpu check $flag" --as gpu-check --db "$DB" --yes
  echo "exit $?"
done

say "collector (NVML + SGLang) in the background"
st_bg collect --server "$URL" --gpu nvml --interval 1s --db "$DB" > "$WORK/collect.log" 2>&1
pids+=($!)

say "sweep C=1,2,4,8,16,32, knob on vs off"
st bench sweep --server "$URL" --concurrency 1,2,4,8,16,32 --modes on,off --duration-per-level "$SWEEP_SECONDS" \
  --warmup 4 --output-len 256 --input-len 64 --api generate --tag h200-sglang-0.5.17 --save --db "$DB" \
  --profile-out "$OUT/profile.json" --as gpu-check --json > "$WORK/sweep.json"
echo "sweep exit $?"
python3 - "$WORK/sweep.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:
    print("sweep output unreadable:", exc); raise SystemExit(0)
print(json.dumps({k: d[k] for k in d if k != "points"}, indent=1)[:3000])
PY

say "learn policy under a load that crosses the crossover"
st control release --server "$URL" --reason "gpu check: let the policy act" --as gpu-check --db "$DB"
st_bg control auto --server "$URL" --policy learn --interval 2s --db "$DB" > "$WORK/learn.log" 2>&1
LEARN_PID=$!; pids+=($LEARN_PID)
st bench load --server "$URL" --pattern steps:2,32,4,32,2 --period "$LEARN_SECONDS" --duration "$LEARN_SECONDS" \
  --output-len 256 --api generate > "$WORK/load_learn.log" 2>&1
kill -TERM $LEARN_PID; wait $LEARN_PID; echo "learn exit $?"
tail -20 "$WORK/learn.log"

say "hover: ceiling 16, load hovering at 14..18 for ${HOVER_SECONDS}s; override-log growth"
st control set --server "$URL" --max-bs 16 --reason "gpu check: hover" --as gpu-check --db "$DB" --yes
curl -fsS "$URL/server_info" > "$WORK/hover_before.json"
st bench load --server "$URL" --pattern hover:16 --duration "$HOVER_SECONDS" --output-len 256 --api generate \
  > "$WORK/load_hover.log" 2>&1
curl -fsS "$URL/server_info" > "$WORK/hover_after.json"
st control set --server "$URL" --on --reason "gpu check: done" --as gpu-check --db "$DB" --yes

say "stopping the collector; summary"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
wait "${pids[@]}" 2>/dev/null
python3 - "$WORK" "$OUT/summary.json" "$OUT/collect.db" <<'PY'
import json, sqlite3, sys
from pathlib import Path
work, out, db = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
def load(name):
    try:
        return json.loads((work / name).read_text())
    except Exception as exc:  # keep going: the summary says what is missing
        return {"unreadable": str(exc)}
def spectower_state(info):
    return [s.get("spectower") for s in info.get("internal_states", [])] if isinstance(info, dict) else None
summary = {
    "get": load("get.json"),
    "sweep": load("sweep.json"),
    "hover_before": spectower_state(load("hover_before.json")),
    "hover_after": spectower_state(load("hover_after.json")),
}
con = sqlite3.connect(db)
summary["db_counts"] = {t: con.execute(f"select count(*) from {t}").fetchone()[0]
                        for t in ("engine_sample", "gpu_sample", "control_event", "bench_point", "collection_gap")}
summary["policy_events"] = [dict(zip(("ts", "actor", "old", "new", "confirmed", "reason"), r)) for r in con.execute(
    "select ts, actor, old_max_bs, new_max_bs, confirmed, reason from control_event order by ts")]
out.write_text(json.dumps(summary, indent=1))
print(json.dumps({k: summary[k] for k in ("hover_before", "hover_after", "db_counts")}, indent=1))
print("events:", *summary["policy_events"], sep="\n  ")
PY
say "done"
