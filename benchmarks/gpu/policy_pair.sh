#!/usr/bin/env bash
# The policy runs of issue #12 on two GPUs at once (device kind nvidia-h200-x2): two copies of
# benchmarks/gpu/measure_off.sh, each with its own GPU, WORK and ports, so four 10-minute day loads take two slots of
# device time instead of four. A: the EAGLE-3 server and the plain one on GPU 0 (as the sweep ran them), under
# POLICIES_A; B: the same EAGLE-3 server alone on GPU 1 (PLAIN=0; the policy phases never load the plain
# one, and the EAGLE-3 server's KV pool is sized by its own --mem-fraction-static either way), under POLICIES_B.
#
#   PHASES="launch policy wait" bash benchmarks/gpu/policy_pair.sh     # first call: launches, starts the runs, waits
#   PHASES=wait bash benchmarks/gpu/policy_pair.sh                     # next calls, within 30 s of each other
#
# Each side can run its own measure_off.sh phases and attention backend: PHASES_A / PHASES_B (default
# $PHASES), ATTN_A / ATTN_B (default triton), e.g. flashinfer's sweep on A beside a policy run on B:
#   ATTN_A=flashinfer PHASES_A="launch accept sweep" POLICIES_B=learn PHASES_B="launch policy wait"
#
# Every call returns before CALL_SECONDS (default 570) and brings back $OUT/a.tgz and $OUT/b.tgz (each copy's
# $OUT: measure.log, load-*.log, auto-*.log, policy.db once done), since the device tool brings back 8 files.
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PHASES=${PHASES:-launch policy wait} LOAD_SECONDS=${LOAD_SECONDS:-600}
export WAIT_UNTIL=$(( $(date +%s) + ${CALL_SECONDS:-570} ))
export SWEEP_JSON=${SWEEP_JSON:-data/gpu-runs/h200-8b-pair-triton-steps-explore-2026-12-01/1-sweep/sweep.json}
here=$(dirname "${BASH_SOURCE[0]}")
rm -rf /tmp/pair-out && mkdir -p /tmp/pair-out/a /tmp/pair-out/b
CUDA_VISIBLE_DEVICES=0 OUT=/tmp/pair-out/a WORK=/tmp/spectower-off-a SPEC_PORT=30000 PLAIN_PORT=30001 \
  PHASES=${PHASES_A:-$PHASES} ATTN=${ATTN_A:-triton} POLICIES=${POLICIES_A:-on threshold:47} bash "$here/measure_off.sh" 2>&1 | sed -u 's/^/A /' &
sleep 20  # the two launches' CPU-heavy steps (unpacking, writing the models) overlap less
CUDA_VISIBLE_DEVICES=1 OUT=/tmp/pair-out/b WORK=/tmp/spectower-off-b SPEC_PORT=30010 PLAIN_PORT=30011 PLAIN=0 \
  PHASES=${PHASES_B:-$PHASES} ATTN=${ATTN_B:-triton} POLICIES=${POLICIES_B:-off learn} bash "$here/measure_off.sh" 2>&1 | sed -u 's/^/B /' &
wait
for side in a b; do tar -C /tmp/pair-out/$side -czf "$OUT/$side.tgz" .; done
