"""SGLang's /metrics, /server_info (the one typed model) and /v1/loads -> engine samples and counters.
May import storage, collectors' own plumbing (auth, http, promtext) and the plugin package's contracts."""
