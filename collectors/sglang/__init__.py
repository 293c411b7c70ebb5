"""SGLang: /metrics, /server_info and /v1/loads into engine samples."""
