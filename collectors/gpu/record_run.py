"""Record the NVML source on a real GPU under load: the source of ``tests/fixtures/nvml/h200_run.json``.

    python3 -m spectower.collectors.gpu.record_run --seconds 60 --interval 0.5 --out OUT.json [--load-cmd CMD]

Writes, per sample, every read's plain value (or its error) and the readings the sampler made of them, so
the tests can replay the raw values through patched ``pynvml`` functions and check the parsed readings.
Standard library + nvidia-ml-py only (the GPU machine has no sqlmodel); the optional load is any command.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from typing import Any

import pynvml

from .nvml import FI_NVLINK_RX, FI_NVLINK_TX, NvmlSampler, field_value

# A bf16 matmul loop plus host->device copies, so both SM load and PCIe traffic show.
DEFAULT_LOAD = (
    "import torch,time\n"
    "a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16)\n"
    "h=torch.empty(64*1024*1024,dtype=torch.float32).pin_memory()\n"
    "end=time.time()+{secs}\n"
    "while time.time()<end:\n"
    "    for _ in range(20): b=a@a\n"
    "    d=h.to('cuda',non_blocking=True)\n"
    "    torch.cuda.synchronize()\n"
)


def probe(sampler: NvmlSampler) -> dict[str, Any]:
    """One-off facts: per-link NVLink fields and the instant-power field, to learn what this GPU exposes."""
    out: dict[str, Any] = {"nvml_version": None, "per_device": {}}
    try:
        v = pynvml.nvmlSystemGetNVMLVersion()
        out["nvml_version"] = v.decode() if isinstance(v, bytes) else v
    except pynvml.NVMLError as exc:
        out["nvml_version"] = f"error: {exc}"
    for dev in sampler._devices:
        ids = [
            (FI_NVLINK_TX, 0),
            (FI_NVLINK_RX, 0),
            (int(getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)), 0),
        ]
        try:
            vals = pynvml.nvmlDeviceGetFieldValues(dev.handle, ids)
            out["per_device"][dev.index] = [
                [int(f.fieldId), int(f.scopeId), int(f.nvmlReturn), field_value(f)] for f in vals
            ]
        except pynvml.NVMLError as exc:
            out["per_device"][dev.index] = f"error: {exc}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--load-start", type=float, default=5.0, help="seconds before the load starts")
    ap.add_argument("--load-seconds", type=float, default=45.0)
    ap.add_argument("--no-load", action="store_true")
    args = ap.parse_args(argv)

    sampler = NvmlSampler(record=True)
    facts = sampler.start()
    doc: dict[str, Any] = {
        "meta": {
            "host": sampler.host,
            "driver_version": sampler.driver_version,
            "cuda_version": sampler.cuda_version,
            "python": platform.python_version(),
            "interval_s": args.interval,
            "load": None if args.no_load else DEFAULT_LOAD.format(secs=args.load_seconds),
            "load_start_s": args.load_start,
        },
        "facts": [f.__dict__ for f in facts],
        "start_raw": {str(k): v for k, v in sampler.last_raw.items()},
        "probe": probe(sampler),
        "samples": [],
    }
    try:
        import importlib.metadata as md

        doc["meta"]["nvidia_ml_py"] = md.version("nvidia-ml-py")
    except Exception:
        doc["meta"]["nvidia_ml_py"] = None

    t0 = time.time()
    load: subprocess.Popen[bytes] | None = None
    cpu_times: list[float] = []
    next_t = t0
    while time.time() - t0 < args.seconds:
        if load is None and not args.no_load and time.time() - t0 >= args.load_start:
            load = subprocess.Popen([sys.executable, "-c", DEFAULT_LOAD.format(secs=args.load_seconds)])
        c0 = time.process_time()
        readings = sampler.sample()
        cpu_times.append(time.process_time() - c0)
        doc["samples"].append(
            {
                "t": readings[0].ts if readings else time.time(),
                "elapsed_s": round(time.time() - t0, 3),
                "load_running": load is not None and load.poll() is None,
                "raw": {str(k): v for k, v in sampler.last_raw.items()},
                "readings": [r.as_dict() for r in readings],
            }
        )
        next_t += args.interval
        time.sleep(max(0.0, next_t - time.time()))
    if load is not None:
        try:
            load.wait(timeout=30)
        except subprocess.TimeoutExpired:
            load.kill()
        doc["meta"]["load_returncode"] = load.returncode
    sampler.close()
    cpu_times.sort()
    doc["meta"]["sample_cpu_s"] = {
        "n": len(cpu_times),
        "median": cpu_times[len(cpu_times) // 2] if cpu_times else None,
        "max": cpu_times[-1] if cpu_times else None,
        "gpus": len(facts),
    }
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    print(json.dumps(doc["meta"], indent=1))
    print("facts:", json.dumps(doc["facts"]))
    print("probe:", json.dumps(doc["probe"]))
    if doc["samples"]:
        mid = doc["samples"][len(doc["samples"]) // 2]
        print("mid reading:", json.dumps(mid["readings"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
