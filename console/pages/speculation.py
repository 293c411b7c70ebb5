"""The speculation page (drawn by console.views.speculation)."""

from console.views import speculation

speculation.render()
