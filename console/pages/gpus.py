"""The gpus page (drawn by spectower.console.views.gpus)."""

from spectower.console.views import common, gpus

common.route()
common.shows_database_errors(gpus.render)()
