"""``python -m spectower.console.streamlit_offline run app.py ...``: Streamlit's own CLI with its one internet
look-up taken out, so the console never reaches outside the machine it runs on.

Streamlit asks ``checkip.amazonaws.com`` for the machine's public address (``net_util.get_external_ip``):
at start when bound to a wildcard address, and on every WebSocket whose Origin is not the page's own Host
(a reverse proxy, or a foreign page probing it), where the answer only widens its allowed origins. No
setting turns that off (``browser.serverAddress`` is checked first but the look-up still follows a
mismatch, and ``server.enableCORS=false`` would allow every origin), so the launcher answers "unknown",
which Streamlit already handles: no External URL line, and that origin refused unless allow-listed.
"""

from __future__ import annotations

import sys


def _no_external_ip() -> None:
    """Streamlit's ``get_external_ip`` without the HTTP request: the address is unknown."""
    return None


def main() -> None:
    from streamlit import net_util
    from streamlit.web import cli

    net_util.get_external_ip = _no_external_ip  # callers look it up on the module at call time
    sys.argv[0] = "streamlit"
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
