"""The history dashboard in a real headless browser (Debian's chromium through chromedriver):
built from the store of the real CPU nightlies (tests/data/history/step: a 3 % step from night 12),
every page loads without a console error, the plots render (their SVG has size and one dot per
run, the change point is drawn), every link resolves.  The series page's screenshot is kept in
test-artifacts/history-site.png (or $PARITY_TEST_ARTIFACTS) for CI to upload."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from tests.conftest import DATA, REPO, run_parity

pytestmark = pytest.mark.slow
STEP = DATA / "history" / "step"


def browser():
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver must be installed in CI (scripts/ensure-system-deps)")
        pytest.skip("no chromium / chromedriver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = shutil.which("chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1000", "--allow-file-access-from-files"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=opts)


def errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def links_resolve(driver) -> list[str]:
    """The page's hrefs that name no file (the site is file:// pages linking file:// pages)."""
    from selenium.webdriver.common.by import By

    bad = []
    for a in driver.find_elements(By.CSS_SELECTOR, "a[href]"):
        url = urlparse(a.get_property("href"))  # resolved against the page by the browser
        if url.scheme != "file" or not Path(unquote(url.path)).is_file():
            bad.append(a.get_attribute("href"))
    return bad


def keep(shot: Path) -> Path:
    dest = Path(os.environ.get("PARITY_TEST_ARTIFACTS") or REPO / "test-artifacts")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, dest / "history-site.png")
    return dest / "history-site.png"


def test_the_dashboard_loads_renders_and_links(tmp_path):
    from selenium.webdriver.common.by import By

    db, site = tmp_path / "h.duckdb", tmp_path / "site"
    assert run_parity("history", "ingest", str(STEP), "--store", str(db)).returncode == 0
    r = run_parity("history", "site", str(site), "--store", str(db), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    nights = len([d for d in STEP.iterdir() if (d / "manifest.json").is_file()])
    driver = browser()
    try:
        # the harness sees a console error when there is one (a missing image), so silence below means none
        (tmp_path / "broken.html").write_text('<!doctype html><img src="missing.png">')
        driver.get((tmp_path / "broken.html").as_uri())
        assert errors(driver), "chromium reported no console error for a missing image: the check below would prove nothing"

        driver.get((site / "index.html").as_uri())
        assert driver.title == "parity history" and errors(driver) == []
        assert links_resolve(driver) == []
        rows = driver.find_elements(By.CSS_SELECTOR, "h2 + table tr.worse")  # the open change points, worse: red rows
        assert rows and any("s_tg" in r.text and "bisect --over series" in r.text for r in rows)
        series_link = next(a for a in driver.find_elements(By.CSS_SELECTOR, "tr.worse a") if "s_tg" in a.text)
        series_link.click()
        assert errors(driver) == [] and links_resolve(driver) == []
        svg = driver.find_element(By.CSS_SELECTOR, "svg.series-plot")
        assert svg.size["width"] > 800 and svg.size["height"] > 300  # rendered, with its size
        assert int(svg.get_attribute("data-points")) == nights and len(svg.find_elements(By.CSS_SELECTOR, "circle.pt")) == nights
        assert len(svg.find_elements(By.CSS_SELECTOR, "line.cp")) == int(svg.get_attribute("data-changes")) >= 1
        assert len(svg.find_elements(By.CSS_SELECTOR, "line.whisker")) == nights  # each night's paired interval
        shot = tmp_path / "history-site.png"
        driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
        kept = keep(shot)
        run_link = driver.find_elements(By.CSS_SELECTOR, "table a[href*='runs/']")[-1]
        run_link.click()
        assert errors(driver) == [] and links_resolve(driver) == []
        report = driver.find_element(By.CSS_SELECTOR, "a.report")
        report.click()
        assert "nightly-cpu" in driver.find_element(By.TAG_NAME, "body").text  # the copied report opens
    finally:
        driver.quit()
    assert doc["series"] >= 2 and doc["runs"] == nights
    print(f"screenshot kept: {kept}")
