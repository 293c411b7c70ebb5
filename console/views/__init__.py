"""One module per console page; each exposes ``render()``. Page scripts in console/pages/ call them."""
