"""A plotly figure kept as the plain dicts the console's charts build (console/charts.py ``figure_of``)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from _plotly_utils.utils import convert_to_base64
from plotly.basedatatypes import BasePlotlyType


class PlainFigure(go.Figure):
    """A figure kept as the plain dicts it was built from until something asks for more than ``to_dict``
    (all ``st.plotly_chart`` asks for): plotly's object tree for 8 GPU panels took 6 ms to build and its
    ``to_dict`` another 3 to deep-copy back out, per chart and refresh. ``to_dict`` gives what
    ``go.Figure({"data": data, "layout": layout}, _validate=False).to_dict()`` gives (tests/
    test_console_app.py holds them equal on every page); any other attribute builds that figure first."""

    def __init__(self, data: list[dict[str, Any]], layout: dict[str, Any]) -> None:
        self.__dict__["_plain"] = {"data": data, "layout": layout}  # BaseFigure's __setattr__ not involved

    def __getattr__(self, name: str) -> Any:
        plain = self.__dict__.pop("_plain", None)
        if plain is None:  # a real miss (or BaseFigure's own lookups once built)
            raise AttributeError(name)
        go.Figure.__init__(self, plain, _validate=False)
        return getattr(self, name)

    def add_plain(self, traces: list[dict[str, Any]], layout: dict[str, Any]) -> None:
        """Add ``traces`` and set top-level ``layout`` keys (a second axis, say) on a figure still kept plain,
        as ``add_trace`` and ``update_layout`` would (those, once plotly's figure is built)."""
        plain = self.__dict__.get("_plain")
        if plain is None:
            for trace in traces:
                self.add_trace(trace)
            self.update_layout(layout)
            return
        plain["data"].extend(traces)
        plain["layout"].update(layout)

    def to_dict(self) -> dict[str, Any]:
        plain = self.__dict__.get("_plain")
        if plain is None:
            return super().to_dict()
        layout = _fresh(plain["layout"])
        if layout.get("template") is None and pio.templates.default is not None:
            default = pio.templates.default
            template = default if isinstance(default, BasePlotlyType) else pio.templates[default]
            layout["template"] = template.to_plotly_json()  # as BaseFigure adds the default template
        out = {"data": [_fresh(trace) for trace in plain["data"]], "layout": layout}
        convert_to_base64(out)  # as BaseFigure.to_dict does: numeric arrays to typed-array specs
        return out


def _fresh(value: Any) -> Any:
    """A copy of every dict and list that holds dicts or lists (what ``convert_to_base64`` may write into),
    sharing the lists of plain values (thousands of points, never written to)."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list | tuple) and any(isinstance(v, dict | list | tuple) for v in value):
        return [_fresh(v) for v in value]
    return value
