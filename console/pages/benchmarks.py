"""The benchmarks page (drawn by spectower.console.views.benchmarks)."""

from spectower.console.views import benchmarks, common

common.route()
benchmarks.render()
