"""The control page (drawn by console.views.control)."""

from console.views import control

control.render()
