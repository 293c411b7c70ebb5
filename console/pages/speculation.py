"""The speculation page (drawn by spectower.console.views.speculation)."""

from spectower.console.views import speculation

speculation.render()
