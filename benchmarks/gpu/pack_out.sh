#!/usr/bin/env bash
# The device tool hands back at most 8 files a call (2026-12-03: sweep.json and policy.db were left out; again
# 2026-12-07 under OUT_MAX_FILES=99): past OUT_MAX_FILES (8), everything in $OUT but measure.log goes back as
# one archive, out.tgz (tar -xzf out.tgz; an out.tgz of an earlier pack goes inside the new one, whole).
# measure_off.sh runs this last; a call whose measure_off.sh runs under `timeout` (killed before its end) runs
# it after: `...; bash benchmarks/gpu/pack_out.sh`.
set -uo pipefail
: "${OUT:?OUT: the folder the device tool hands back}"
limit=${OUT_MAX_FILES:-8}
if [ "$(find "$OUT" -mindepth 1 -maxdepth 1 | wc -l)" -gt "$limit" ]; then
  packed=$(mktemp -d)
  tar -C "$OUT" -czf "$packed/out.tgz" --exclude ./measure.log . \
    && find "$OUT" -mindepth 1 -maxdepth 1 ! -name measure.log -exec rm -rf {} + \
    && mv "$packed/out.tgz" "$OUT/out.tgz" \
    && echo "more than $limit files: packed into out.tgz"
  rmdir "$packed" 2>/dev/null
fi
exit 0
