"""One module per console page; each exposes ``render()``. Page scripts in console/pages/ call them.
May import storage, control (a change only through console.actions) and the console's helpers."""
