# Sourced by the gpu/ scripts: spectower's CLI from the installed-layout tree the scripts unpack.
# -P: the checkout's own spectower/ folder (cwd) must not shadow that tree on PYTHONPATH.
st() { python3 -P -m spectower.console.cli "$@"; }
# The CLI in the background, with $! its own pid, so that `kill $!` stops it. `st ... &` leaves $! on a
# subshell whose python child outlives the kill: a killed load went on loading the server (measure_explore's
# next level then ran under both loads), a killed `control auto` went on writing the knob, a killed
# collector went on writing its database.
st_bg() { ( exec python3 -P -m spectower.console.cli "$@" ) & }
