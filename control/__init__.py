"""The speculation knob: its contract, client, audit trail, policies, SGLang plugin and launch config.
May import storage and the collectors' parsers/plumbing; the plugin and contract modules: standard library."""

