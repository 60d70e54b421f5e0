"""Browser tests: fixtures from tests/support/browser.py, and the report hook their failure screenshots need.
(`browser` itself comes from the root conftest: one Playwright per test session, shared with
tests/test_product_process.py, since a second sync Playwright cannot start while one runs.)"""
import pytest

from tests.support.browser import capture_reports, feather_server, page_js, page_nojs  # noqa: F401


@pytest.fixture(params=[False, True], ids=["nojs", "js"])
def page(server, browser, request):
    """A page on the module's own `server`, once with JavaScript off and once on (`page.js`)."""
    context = browser.new_context(java_script_enabled=request.param, base_url=server.url)
    page = context.new_page()
    page.js = request.param
    yield page
    context.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    capture_reports(item, call, outcome)
