"""The control page (drawn by spectower.console.views.control)."""

from spectower.console.views import control

control.render()
