"""collectors/http.py: the one URL-flag check every config uses, and one "server did not answer" error."""

from __future__ import annotations

import pytest
from spectower.collectors.bench.errors import BenchError
from spectower.collectors.bench.sweep import SweepConfig
from spectower.collectors.bench.walk import WalkConfig
from spectower.collectors.daemon import DaemonConfig
from spectower.collectors.http import BoundedReadError, ServerUnreachable, check_http_url
from spectower.collectors.sglang.scraper import ScrapeError


def test_check_http_url_names_the_flag() -> None:
    assert check_http_url("https://a:1", "--server") == "https://a:1"
    with pytest.raises(ValueError, match=r"^--plain-server must be an http\(s\) URL, got 'a:1'$"):
        check_http_url("a:1", "--plain-server")
    with pytest.raises(BenchError):
        check_http_url("ftp://a", "--server", BenchError)


@pytest.mark.parametrize(
    ("make", "flag"),
    [
        (lambda: DaemonConfig(servers=["a:1"]), "--server"),
        (lambda: DaemonConfig(prometheus="a:9090"), "--prometheus"),
        (lambda: DaemonConfig(gpu="dcgm=a:9400"), "--gpu dcgm=URL"),
        (lambda: SweepConfig(server="a:1").validate(), "--server"),
        (lambda: SweepConfig(server="http://a:1", plain_server="a:2").validate(), "--plain-server"),
        (lambda: WalkConfig(server="a:1", pattern=None).validate(), "--server"),  # type: ignore[arg-type]
    ],
)
def test_every_url_flag_is_the_same_check(make: object, flag: str) -> None:
    with pytest.raises(ValueError, match=rf"^{flag} must be an http\(s\) URL, got 'a:\d+'$"):
        make()  # type: ignore[operator]


def test_a_failed_scrape_is_a_server_that_did_not_answer() -> None:
    assert issubclass(ScrapeError, ServerUnreachable) and issubclass(BoundedReadError, ServerUnreachable)
    assert issubclass(ServerUnreachable, ConnectionError)
