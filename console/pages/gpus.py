"""The gpus page (drawn by spectower.console.views.gpus)."""

from spectower.console.views import gpus

gpus.render()
