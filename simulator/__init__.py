"""An emulated SGLang server (same HTTP surface and knob) driven by a profile, and a virtual-time harness.
May import control (the knob contract, the plugin's gate, the engine counters, the policies it scores)."""

