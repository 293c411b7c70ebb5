"""The benchmarks page (drawn by spectower.console.views.benchmarks)."""

from spectower.console.views import benchmarks, common

common.route()
common.shows_database_errors(benchmarks.render)()
