"""Helpers of the browser tests (imported by conftest.py and the tests): server handle, screenshots, REST setup."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Locator, Page

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "e2e"
PASSWORD = "correct-horse-battery"


@dataclass
class Server:
    url: str
    data_dir: Path
    env: dict[str, str]
    tiny_model_dir: Path


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def hover_chart_until(over: Locator, x: float, shows: Callable[[], None], timeout_s: float = 30) -> None:
    """Hover a chart's `.u-over` `x` px from its left edge at mid-height until `shows()` (expect calls with a short
    timeout) passes. A card that loads above the chart moves it after a hover, leaving the mouse over something else
    (no mousemove reaches the chart then), so the hover is redone at the chart's current place."""
    deadline = time.monotonic() + timeout_s
    while True:
        box = over.bounding_box()
        if box is not None:
            over.hover(position={"x": x, "y": box["height"] / 2})  # scrolls it into view and waits until it is still
            try:
                shows()
                return
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
        elif time.monotonic() > deadline:
            raise AssertionError("the chart was never laid out")


def open_signed_in(page: Page, server: Server, token: str, route: str) -> None:
    """Open `#route` as the holder of `token` (the dashboard keeps its session token in localStorage). The token is
    set on a same-origin page that is not the dashboard: one booted at `/` redirects to its default route a moment
    later, which could land after (and replace) the `#route` navigation."""
    page.goto(f"{server.url}/api/v1/health")
    page.evaluate("token => localStorage.setItem('streamrl.token', token)", token)
    page.goto(f"{server.url}/#{route}")
    page.reload()  # a hash change alone keeps the already-loaded (signed-out) app


def fill_name_and_arithmetic(page: Page, name: str) -> None:
    """The submit form's job name and the built-in arithmetic dataset (what most form tests start with)."""
    page.locator("input[name=name]").fill(name)
    page.locator("select[name=dataset_source]").select_option("builtin")
    page.locator("select[name=builtin]").select_option("arithmetic")


class Api:
    """A thin REST helper for test setup (what a CLI/SDK user would do), authenticated as one user."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=f"{base_url}/api/v1", timeout=30)

    def register(self, email: str, password: str, team_name: str) -> dict[str, Any]:
        answer = self.http.post("/auth/register", json={"email": email, "password": password, "team_name": team_name})
        assert answer.status_code == 201, answer.text
        return self.login(email, password)

    def login(self, email: str, password: str) -> dict[str, Any]:
        login = self.http.post("/auth/login", json={"email": email, "password": password})
        assert login.status_code == 200, login.text
        self.http.headers["Authorization"] = f"Bearer {login.json()['token']}"
        return login.json()

    def post(self, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = self.http.post(path, **kwargs)
        assert answer.status_code < 300, f"{path}: {answer.status_code} {answer.text}"
        return answer.json()

    def get(self, path: str, **kwargs: Any) -> dict[str, Any]:
        answer = self.http.get(path, **kwargs)
        assert answer.status_code == 200, f"{path}: {answer.status_code} {answer.text}"
        return answer.json()


MakeApi = Callable[[], Api]  # the `make_api` fixture: a fresh, signed-out REST helper


def invited_member(base_url: str, inviter: Api, email: str, role: str) -> tuple[Api, str]:
    """`email` registers its own account, `inviter`'s team invites it with `role`, it accepts and acts in that team:
    the only way a person joins a team. Returns its REST helper and session token, both for the inviting team."""
    member = Api(base_url)
    member.register(email, PASSWORD, f"own-{email}")
    team_id = inviter.get("/teams/current")["id"]
    invitation = inviter.post("/teams/current/invitations", json={"email": email, "role": role})
    member.post(f"/auth/invitations/{invitation['id']}/accept")
    switched = member.post("/auth/switch-team", json={"team_id": team_id})
    member.http.headers["Authorization"] = f"Bearer {switched['token']}"
    return member, str(switched["token"])
