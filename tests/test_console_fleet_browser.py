"""The Fleet page in a real browser (headless Chromium through playwright) against `spectower console`:
three REAL simulated replicas named as fleet `prod` in spectower.toml, a REAL collector, one replica
killed (the page says since when it stopped answering), then one fleet flip from the page: one
confirmation, every replica written, the two alive read back and audited, the dead one named."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from spectower.control import audit
from spectower.storage import open_database

from benchmarks.simulator_process import wait_until_ok
from tests.conftest import SPECTOWER_CLI, free_port
from tests.console_layout import full_page_screenshot
from tests.test_console_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, _spawn, _stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ADMIN_KEY = "fleet-browser-admin-key"
OPERATOR = "fleet-browser"


def _knob(url: str) -> int:
    return int(
        httpx.get(f"{url}/server_info", timeout=10).json()["internal_states"][0]["spectower"]["spec_max_bs"]
    )


@pytest.fixture
def fleet_console(tmp_path: Path, simulator_factory: Any) -> Iterator[tuple[str, list[Any], Path]]:
    sims = [simulator_factory(admin_key=ADMIN_KEY) for _ in range(3)]
    db = tmp_path / "fleet.db"
    open_database(db).close()
    urls = ", ".join(f'"{s.base_url}"' for s in sims)
    (tmp_path / "spectower.toml").write_text(f"[fleets.prod]\nservers = [{urls}]\n")
    servers = [arg for s in sims for arg in ("--server", s.base_url)]
    collector = _spawn([*SPECTOWER_CLI, "collect", *servers, "--db", str(db), "--interval", "1s"],
                       tmp_path / "collect.log")  # fmt: skip
    port = free_port()
    env = {**os.environ, "SPECTOWER_ADMIN_KEY": ADMIN_KEY, "SPECTOWER_OPERATOR": OPERATOR,
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "SPECTOWER_CONSOLE_REFRESH_S": "30"}  # fmt: skip
    env.pop("SPECTOWER_ADMIN_KEY_FILE", None)
    log = (tmp_path / "console.log").open("wb")
    # the console's working directory holds spectower.toml: it reads the fleet as `--fleet prod` does
    argv = [*SPECTOWER_CLI, "console", "--db", str(db), "--port", str(port)]
    console = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)  # fmt: skip
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/_stcore/health", 60)
        deadline = time.monotonic() + 60
        while len(_servers_with_samples(db)) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
        sims[2].kill()  # stopped answering, after the collector heard from it
        yield f"http://127.0.0.1:{port}", sims, db
    finally:
        _stop(console)
        log.close()
        _stop(collector)


def _servers_with_samples(db: Path) -> set[int]:
    from tests.conftest import db_rows

    return {row[0] for row in db_rows(db, "SELECT DISTINCT server_id FROM engine_sample")}


def test_fleet_page_flips_every_replica_and_names_the_one_that_stopped(
    fleet_console: tuple[str, list[Any], Path],
) -> None:
    from playwright.sync_api import sync_playwright

    base, sims, db = fleet_console
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1920, "height": 1080})
        page.set_default_timeout(90_000)
        try:
            page.goto(f"{base}/fleet?fleet=prod")
            page.get_by_text(f"{sims[2].base_url}: stopped answering since").wait_for()
            assert page.get_by_text("3 replicas from spectower.toml: fleets.prod").count() == 1
            page.get_by_text("off", exact=True).first.click()
            reason = page.get_by_label("Reason (required, recorded in each replica's audit row)")
            reason.fill("browser: fleet incident")
            reason.press("Enter")
            page.get_by_role("button", name="Review fleet change").click()
            page.get_by_text("on 3 replicas at once as operator:fleet-browser").wait_for()
            page.get_by_role("button", name="Confirm").click()
            page.get_by_text("Partial: confirmed by read-back on 2 of 3 replicas").wait_for()
            assert page.get_by_text(f"{sims[2].base_url} not confirmed").count() == 1
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            full_page_screenshot(page, SCREENSHOTS / "fleet-after-flip.png")
        finally:
            browser.close()
    assert [_knob(s.base_url) for s in sims[:2]] == [0, 0]
    with open_database(db) as store:
        rows = [r for r in audit.list_events(store, limit=100) if r.actor == f"operator:{OPERATOR}"]
    outcome = {r.server_url: r.confirmed for r in rows}
    assert outcome == {sims[0].base_url: True, sims[1].base_url: True, sims[2].base_url: False}
    assert all(r.reason == "browser: fleet incident" for r in rows)
