"""GPU sources: NVML on this host and dcgm-exporter on another -> GPU facts and readings.
May import storage.models and collectors' own plumbing (http, promtext, rates); nothing else of ours."""
