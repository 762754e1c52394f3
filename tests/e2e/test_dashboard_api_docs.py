"""/docs (Swagger UI) and /redoc render with the network cut: every asset comes from the API itself."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from e2e_support import Server, shot
from playwright.sync_api import Page, Route, expect

pytestmark = pytest.mark.e2e


def cut_network(page: Page) -> list[str]:
    """Abort every request that would leave 127.0.0.1; returns the list of those attempted."""
    left: list[str] = []

    def only_local(route: Route) -> None:
        url = route.request.url
        if urlparse(url).hostname in ("127.0.0.1", "localhost") or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            left.append(url)
            route.abort()

    page.route("**/*", only_local)
    return left


def test_api_docs_render_offline(page: Page, api_server: Server) -> None:
    left = cut_network(page)
    page.goto(f"{api_server.url}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("StreamRL")
    expect(page.locator(".opblock").first).to_be_visible()  # the operations, read from /openapi.json
    shot(page, "39-docs-offline")
    page.goto(f"{api_server.url}/redoc")
    expect(page.locator(".api-info h1, h1").first).to_contain_text("StreamRL")
    assert left == [], f"requests left 127.0.0.1: {left}"
