"""`spectower demo`: the whole product on one machine against the simulator, as child processes it owns.
May import storage and the console's commands; the children are separate `spectower` processes."""
