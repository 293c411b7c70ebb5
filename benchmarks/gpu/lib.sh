# Sourced by the gpu/ scripts: spectower's CLI from the installed-layout tree the scripts unpack.
# -P: the checkout's own spectower/ folder (cwd) must not shadow that tree on PYTHONPATH.
st() { python3 -P -m spectower.console.cli "$@"; }
# The CLI in the background, with $! its own pid, so that `kill $!` stops it. `st ... &` leaves $! on a
# subshell whose python child outlives the kill: a killed load went on loading the server (measure_explore's
# next level then ran under both loads), a killed `control auto` went on writing the knob, a killed
# collector went on writing its database.
st_bg() { ( exec python3 -P -m spectower.console.cli "$@" ) & }
# The label of a policy run in DIR: NAME, or NAME-2, NAME-3, ... when a run of that name is there already
# (load-<label>.log): a launch's policy phases share one folder, so a policy run again in a later call keeps
# the earlier runs' files beside its own.
run_label() {
  local dir=$1 name=$2 label=$2 n=2
  while [ -e "$dir/load-$label.log" ]; do label=$name-$n; n=$((n + 1)); done
  echo "$label"
}
