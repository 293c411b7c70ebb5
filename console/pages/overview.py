"""The overview page (drawn by spectower.console.views.overview)."""

from spectower.console.views import overview

overview.render()
