"""A headless chromium through selenium's chromedriver (tests/test_browser.py and
scripts/screenshots.py): `start()` returns the driver, or the reason there is none."""

from __future__ import annotations

import shutil


def start(width: int = 1400, height: int = 1000):
    """A webdriver whose console log is kept (`errors(driver)`), or a string saying what
    is missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return "selenium is not installed (make test-full installs the 'browser' extra)"
    names = ("chromium", "chromium-browser", "google-chrome")
    chromium = next((p for p in map(shutil.which, names) if p), None)
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        return (
            "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def errors(driver) -> list[str]:
    """The console's errors since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
