"""The overview page (drawn by console.views.overview)."""

from console.views import overview

overview.render()
