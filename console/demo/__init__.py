"""`spectower demo`: the whole product on one machine against the simulator, as child processes it owns."""
