"""The Ferry page in a real Airflow api-server, driven by headless Chromium; and the
page, its API and the metrics endpoint refusing anyone Airflow has not authenticated."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import jwt
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.support.monitoring import value_of
from tests.webui.conftest import PASSWORD, USER, AirflowServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"  # Debian's; scripts/test-tools.sh installs it
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def log_in(page: Page, server: AirflowServer) -> None:
    """Open the Ferry page as a user would: Airflow's login form first, then back."""
    page.goto(f"{server.url}/ferry/")
    page.wait_for_url("**/auth/login?next=**")
    page.fill("input[name=username]", USER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/ferry/")


def test_the_ferry_page_shows_the_flows_of_the_test_config_in_a_real_browser(
    airflow_server: AirflowServer, tmp_path: Path,
) -> None:
    flow = airflow_server.flow
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000})
        try:
            page = browser.new_page()
            log_in(page, airflow_server)

            section = page.locator(f'section.flow[data-flow="{flow.name}"]')
            expect(section).to_be_visible()
            expect(section.locator("h2")).to_have_text(f"{flow.source} → {flow.target}")
            rows = section.locator("table.partitions tbody tr")
            expect(rows).to_have_count(2)
            seen = [(rows.nth(i).get_attribute("data-topic"),
                     rows.nth(i).get_attribute("data-partition"),
                     rows.nth(i).get_attribute("data-lag-records")) for i in range(2)]
            assert seen == [(airflow_server.topic, "0", "7"), (airflow_server.topic, "1", "0")]
            expect(rows.nth(0)).to_contain_text(flow.remote_topic(airflow_server.topic))
            expect(section.locator(".total-lag")).to_have_text("7")
            # the two points record_lag wrote: 40 records behind, then 7
            expect(section.locator("svg.lag-chart")).to_have_attribute("data-points", "2")
            page.screenshot(path=str(ARTIFACTS / "ferry-page-alone.png"), full_page=True)

            # in Airflow's own UI: Browse -> Ferry hosts the same page
            page.goto(f"{airflow_server.url}/")
            page.get_by_role("button", name="Browse").click()
            page.get_by_role("menuitem", name="Ferry").click()
            page.wait_for_url("**/plugin/ferry**")
            hosted = page.frame_locator("iframe").locator(
                f'section.flow[data-flow="{flow.name}"]')
            # hosted, the page is served through Airflow's API server, which CI's load (four
            # workers on two cores) slowed past the default 5 s twice; the page alone was
            # already seen whole above
            expect(hosted.locator("table.partitions tbody tr")).to_have_count(2, timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "ferry-page.png"))
        finally:
            browser.close()
    assert (ARTIFACTS / "ferry-page.png").stat().st_size > 10_000


def request(server: AirflowServer, path: str, authorization: str | None = None,
            cookie: str | None = None) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) of one GET, redirects not followed."""
    netloc = urlsplit(server.url).netloc
    connection = http.client.HTTPConnection(netloc, timeout=120)
    headers = {}
    if authorization:
        headers["Authorization"] = authorization
    if cookie:
        headers["Cookie"] = cookie
    try:
        connection.request("GET", path, headers=headers)
        answer = connection.getresponse()
        return (answer.status, {k.lower(): v for k, v in answer.getheaders()},
                answer.read().decode())
    finally:
        connection.close()


def scrape(server: AirflowServer, authorization: str | None = None,
           cookie: str | None = None) -> tuple[int, dict[str, str], str]:
    """A scrape of /ferry/metrics, each answered at once: only `ferry_metrics_collected 0`
    while the server's first background collection runs (the wait for it is polled, at
    most a minute), then the latest collection."""
    deadline = time.monotonic() + 60
    while True:
        status, headers, body = request(server, "/ferry/metrics", authorization, cookie)
        if status != 200 or value_of(body, "ferry_metrics_collected") != 0 \
                or time.monotonic() > deadline:
            return status, headers, body
        time.sleep(0.5)


def forged() -> str:
    """A well-formed JWT for an admin, signed with a key the api-server does not have."""
    return jwt.encode({"sub": USER, "role": "admin", "aud": "apache-airflow"},
                      "not-the-servers-secret-" + "x" * 64, algorithm="HS512")


@pytest.mark.parametrize("path", ["/ferry/api/flows", "/ferry/metrics"])
@pytest.mark.parametrize("credential", ["none", "forged bearer", "forged cookie",
                                        "not a jwt"])
def test_anonymous_or_forged_requests_to_the_api_and_metrics_are_refused(
    airflow_server: AirflowServer, path: str, credential: str,
) -> None:
    authorization = {"forged bearer": f"Bearer {forged()}",
                     "not a jwt": "Bearer nope"}.get(credential)
    cookie = f"_token={forged()}" if credential == "forged cookie" else None

    status, headers, body = request(airflow_server, path, authorization, cookie)

    assert status == 401, body
    assert headers["www-authenticate"] == "Bearer"
    assert "lag" not in body and airflow_server.topic not in body


def test_an_anonymous_browser_is_sent_to_airflows_login_and_sees_nothing(
    airflow_server: AirflowServer,
) -> None:
    status, headers, body = request(airflow_server, "/ferry/")

    assert status == 303 and body == ""
    assert headers["location"].startswith("/auth/login?next=")
    assert request(airflow_server, "/ferry/", cookie=f"_token={forged()}")[0] == 303


def test_the_runbook_every_alert_links_to_opens_for_a_signed_in_user_only(
    airflow_server: AirflowServer,
) -> None:
    status, _, body = request(airflow_server, "/ferry/runbook",
                              f"Bearer {airflow_server.token()}")

    assert status == 200
    assert '<h2 id="ferryflowdown">FerryFlowDown</h2>' in body
    assert '<a id="ferrylagcritical"></a>' in body
    anonymous, headers, nothing = request(airflow_server, "/ferry/runbook")
    assert anonymous == 303 and nothing == ""
    assert headers["location"].startswith("/auth/login?next=")
    scraper = request(airflow_server, "/ferry/runbook", f"Bearer {airflow_server.scrape_token}")
    assert scraper[0] == 303


def test_the_scrape_token_opens_metrics_only(airflow_server: AirflowServer) -> None:
    scrape_bearer = f"Bearer {airflow_server.scrape_token}"
    flow = airflow_server.flow

    status, headers, body = scrape(airflow_server, scrape_bearer)

    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    remote = flow.remote_topic(airflow_server.topic)
    assert value_of(body, "ferry_lag_records", source=flow.source, target=flow.target,
                    topic=remote, partition="0") == 7
    assert value_of(body, "ferry_metrics_age_seconds") is not None
    assert value_of(body, "process_resident_memory_bytes")  # the api-server's own
    assert request(airflow_server, "/ferry/api/flows", scrape_bearer)[0] == 401
    assert request(airflow_server, "/ferry/", scrape_bearer)[0] == 303
    assert airflow_server.scrape_token not in airflow_server.log.read_text()


def test_an_airflow_token_opens_the_api_and_metrics(airflow_server: AirflowServer) -> None:
    token = airflow_server.token()

    status, _, body = request(airflow_server, "/ferry/api/flows", f"Bearer {token}")

    assert status == 200
    flows = {f["flow"]: f for f in json.loads(body)["flows"]}
    assert list(flows) == [f.name for f in airflow_server.config.enabled_flows]
    flow = flows[airflow_server.flow.name]
    assert [(p["partition"], p["lag_records"]) for p in flow["status"]["partitions"]] == \
        [(0, 7), (1, 0)]
    assert [p["records"] for p in flow["lag_history"]] == [40, 7]
    assert scrape(airflow_server, cookie=f"_token={token}")[0] == 200


def test_a_flow_whose_connection_is_missing_shows_why_and_the_other_flows_still_show(
    airflow_server: AirflowServer,
) -> None:
    bearer, flow = f"Bearer {airflow_server.token()}", airflow_server.flow

    status, _, body = request(airflow_server, "/ferry/api/flows", bearer)

    # the flow whose clusters are reachable shows its lag; the other names the connection
    # Airflow does not have, and nothing of it can be read from the clusters
    assert status == 200, body
    flows = {f["flow"]: f for f in json.loads(body)["flows"]}
    assert list(flows) == [f.name for f in airflow_server.config.enabled_flows]
    assert airflow_server.unconnected in flows
    assert flows[flow.name]["error"] is None
    assert [p["lag_records"] for p in flows[flow.name]["status"]["partitions"]] == [7, 0]
    unconnected = flows[airflow_server.unconnected]
    assert unconnected["status"] is None
    assert airflow_server.missing in unconnected["error"], unconnected["error"]
    # and so do the metrics a scraper reads, in one answer
    status, _, body = scrape(airflow_server, f"Bearer {airflow_server.scrape_token}")
    assert status == 200, body
    source, target = airflow_server.unconnected.split("->")
    assert value_of(body, "ferry_flow_up", source=flow.source, target=flow.target) == 1
    assert value_of(body, "ferry_flow_up", source=source, target=target) == 0
