"""The gpus page (drawn by console.views.gpus)."""

from console.views import gpus

gpus.render()
