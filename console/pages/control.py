"""The control page (drawn by spectower.console.views.control)."""

from spectower.console.views import common, control

common.route()
control.render()
