"""The fleet page (drawn by spectower.console.views.fleet)."""

from spectower.console.views import common, fleet

common.route()
common.shows_database_errors(fleet.render)()
