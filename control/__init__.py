"""The speculation knob from outside the server: client, audit trail, policies, SGLang launch config.
May import storage, the collectors' parsers/plumbing and the plugin package (wire contract, counters)."""

