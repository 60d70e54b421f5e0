"""Browser tests: fixtures from tests/support/browser.py, and the report hook their failure screenshots need."""
import pytest

from tests.support.browser import browser, capture_reports, feather_server, page_js, page_nojs, playwright_instance  # noqa: F401


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    capture_reports(item, call, outcome)
