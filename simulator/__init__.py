"""An emulated SGLang server (same HTTP surface and knob) driven by a profile, and a virtual-time harness.
May import control (the policies it scores), the plugin package (the knob contract, the gate, the engine
counters) and storage (files, request traces)."""

