"""The control page (drawn by spectower.console.views.control)."""

from spectower.console.views import common, control

common.route()
common.shows_database_errors(control.render)()
