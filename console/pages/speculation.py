"""The speculation page (drawn by spectower.console.views.speculation)."""

from spectower.console.views import common, speculation

common.route()
common.shows_database_errors(speculation.render)()
