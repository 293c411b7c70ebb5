"""The overview page (drawn by spectower.console.views.overview)."""

from spectower.console.views import common, overview

common.route()
common.shows_database_errors(overview.render)()
