"""GPU sources: NVML (local) and dcgm-exporter (remote)."""
