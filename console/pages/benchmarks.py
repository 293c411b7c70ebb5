"""The benchmarks page (drawn by console.views.benchmarks)."""

from console.views import benchmarks

benchmarks.render()
