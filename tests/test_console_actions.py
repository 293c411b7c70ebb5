"""console/actions.py: the knob clients of one console process share one certificate verification context
(httpx's default, built once: loading the CA bundle cost every Control refresh 30-90 ms)."""

from __future__ import annotations

import ssl

from spectower.console import actions


def test_clients_share_one_default_verification_context() -> None:
    contexts = []
    for url in ("https://a.example:30000", "http://b.example:30000"):
        with actions._client(url, None, 5.0) as client:
            contexts.append(client._http._transport._pool._ssl_context)  # type: ignore[attr-defined]
    assert contexts[0] is contexts[1]
    ctx = contexts[0]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname  # verification as httpx's default
    assert ctx.cert_store_stats()["x509_ca"] > 0  # the CA bundle loaded
