#!/usr/bin/env bash
# Builds, from the package registries, the one-file bundle that runs a real SGLang 0.5.17 + EAGLE-3 server
# on the lent H200 (Python 3.12, torch 2.11.0 already there). Nothing third-party is committed: the
# bundle lands in benchmarks/gpu/bundle/ (git-ignored) and travels with `carry`.
#
# Why 0.5.17: the newest release whose torch pin matches the GPU machine's torch 2.11.0.
# Slimmed: sglang-kernel without its FlashAttention-3 library (serve with --attention-backend triton),
# xgrammar without its static library; the GPU image already has torch, transformers, numpy, triton, ...
set -euo pipefail
cd "$(dirname "$0")"
out=bundle
wheels=$out/wheels
site=$out/site
rm -rf "$site" "$wheels"
mkdir -p "$wheels"

plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux_2_31_x86_64
      --platform any)
pkgs=(
  sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1 apache-tvm-ffi==0.1.11 xgrammar==0.2.1
  fastapi starlette uvicorn python-multipart opentelemetry-api pydantic pydantic-core typing-inspection
  annotated-types jiter distro sniffio jsonschema jsonschema-specifications referencing rpds-py
  pyzmq orjson msgspec pybase64 setproctitle partial-json-parser gguf dill compressed-tensors loguru
  zstandard soundfile==0.13.1 cffi pycparser openai==2.6.1
  # spectower's own needs on that machine (collect, bench, control): storage + SSE parsing
  sqlmodel sqlalchemy greenlet httpx-sse
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat[@]}" -d "$wheels" "${pkgs[@]}"
python3 -m pip install -q --no-deps --no-compile --target "$site" --only-binary=:all: --python-version 3.12 \
  --implementation cp "${plat[@]}" "$wheels"/*.whl

# Slim: FA3 (342 MB compressed) is not used with --attention-backend triton; xgrammar's static lib is a build input.
find "$site" -name 'flash_ops*.so' -delete
find "$site" -path '*xgrammar*' -name '*.a' -delete
# Not loaded on an H200 (sm90) with the flags benchmarks/gpu/run_check.sh uses: Blackwell kernels, the InfLLM-V2
# attention backend, zstandard's optional cffi backend (the C backend is the default).
rm -rf "$site/sgl_kernel/sm100" "$site"/sgl_kernel/infllm_ops*.so "$site"/zstandard/_cffi*.so
find "$site" -name '__pycache__' -prune -exec rm -rf {} +
rm -rf "$site"/bin
# SGLang's diffusion serving (12 MB): a language model's launch_server never imports it, and the device call's
# working tree plus this bundle must stay under 64 MiB
rm -rf "$site/sglang/multimodal_gen"
# Still over by 3 MiB once data/gpu-runs grew (2026-12-02, stop 28): binaries a language model's launch with
# triton or flashinfer attention never calls: the native gRPC server (only with --grpc-port), FlashMLA (MLA
# models only; sgl_kernel.flash_mla imports it in a try), libsndfile. soundfile itself becomes a stand-in
# below: SGLang's realtime-audio module imports it at module level and transformers imports it whenever it
# is installed, so without its library the real module fails every launch (OSError, seen on the H200); only
# audio models call it.
rm -f "$site"/sglang/srt/grpc/_core.*.so "$site"/sgl_kernel/flashmla_ops*.so
rm -rf "$site/_soundfile_data" "$site"/soundfile-*.dist-info
# SQLAlchemy's Cython speed-ups (1.8 MiB compressed; it falls back to its pure-Python modules, which serve the
# few bench rows a GPU call saves) and SGLang's test kits but the scripted runtime its scheduler may import
find "$site/sqlalchemy" -name '*.so' -delete
find "$site/sglang/test" -mindepth 1 -maxdepth 1 ! -name __init__.py ! -name scripted_runtime -exec rm -rf {} +

# flashinfer's JIT sources are needed (sgl_kernel's rmsnorm builds flashinfer's norm module at the first
# forward: a launch without them failed there on 2026-12-06), but only the folders flashinfer/jit/env.py puts on
# the include path: CUTLASS's and CCCL's examples, tests, Python packages and docs go (1 MiB compressed, when the
# tree plus this bundle had outgrown the device call's 64 MiB).
fi_data=$site/flashinfer/data
keep_fi=(include csrc cutlass/include cutlass/tools/util/include spdlog/include cccl/cub cccl/libcudacxx/include
         cccl/thrust)
mv "$fi_data" "$fi_data.all" && mkdir -p "$fi_data"
for dir in "${keep_fi[@]}"; do mkdir -p "$fi_data/$(dirname "$dir")" && mv "$fi_data.all/$dir" "$fi_data/$dir"; done
rm -rf "$fi_data.all"

# Debug symbols: xgrammar's bindings and zstandard's C backend ship unstripped (9.1 and 2.0 MB of the
# compressed bundle; 0.7 and 0.3 stripped). --strip-unneeded keeps the dynamic symbols the loader needs
# (as Debian's dh_strip does; xgrammar's 955 exported symbols are all there after it); libraries that ship
# stripped are left as they are. First used for the launch of the device session after 2026-12-02's stop 28:
# STRIP=0 builds without it (tree plus bundle then about 66.7 of the 67.1 MB a device call carries).
if [ "${STRIP:-1}" = 1 ]; then
  find "$site" -name '*.so*' -type f | while read -r lib; do
    if file -b "$lib" | grep -q 'not stripped'; then strip --strip-unneeded "$lib"; fi
  done
fi

# transformers 5.17 (the GPU image's) already defines configs that sglang 0.5.17 registers again
# ("'qwen3_asr' is already used"): register those with exist_ok=True.
grep -rl 'AutoConfig.register(' "$site/sglang/srt/configs" | while read -r f; do
  sed -i -E 's/AutoConfig\.register\(("[^"]+"), ([A-Za-z0-9_]+)\)/AutoConfig.register(\1, \2, exist_ok=True)/' "$f"
done

# Stand-ins and shims (see data/gpu-runs/NOTEBOOK.md)
mkdir -p "$site/IPython" "$site/deep_gemm"
cat > "$site/IPython/__init__.py" <<'PY'
"""Stand-in: sglang only imports IPython.display.HTML/display for notebooks."""
PY
cat > "$site/IPython/display.py" <<'PY'
def HTML(*args, **kwargs):  # noqa: N802 - the real name
    return None


def display(*args, **kwargs):
    return None
PY
cat > "$site/soundfile.py" <<'PY'
"""Stand-in: libsndfile is left out of the bundle; only audio models call soundfile."""
PY
cat > "$site/deep_gemm/__init__.py" <<'PY'
"""Stand-in: imported at module level by the draft CUDA-graph capture path, never called here."""
PY
XZ_OPT="-9 -T2" tar -C "$site" -cJf "$out/sglang-0.5.17-py312.tar.xz" .
du -sh "$site" "$out/sglang-0.5.17-py312.tar.xz" >&2
