"""Team page (members, API key created once then revoked, quotas) and the planner what-if page, in a browser."""

from __future__ import annotations

import re
import uuid

import pytest
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e




def test_team_page_keys_members_quotas(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"dana-{tag}@example.com", PASSWORD, f"team-keys-{tag}")
    open_signed_in(page, api_server, session["token"], "/team")

    page.get_by_placeholder("key name").fill("ci")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_test_id("new-key-secret").locator("code")
    expect(secret).to_have_text(re.compile(r"^tml-"))
    card = page.get_by_test_id("new-key-secret").bounding_box()
    code = secret.bounding_box()
    assert card and code and code["x"] + code["width"] <= card["x"] + card["width"]  # the secret stays in its card
    expect(page.get_by_test_id("new-key-secret").get_by_role("button", name="Copy")).to_be_visible()
    token = secret.inner_text()
    expect(page.get_by_test_id("keys").locator("tbody tr")).to_have_count(1)  # the list reloaded with the new key
    assert make_api().http.get("/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    page.get_by_role("button", name="done").click()
    expect(page.get_by_test_id("new-key-secret")).to_have_count(0)  # shown once
    page.get_by_test_id("keys").get_by_role("button", name="revoke").click()
    expect(page.get_by_test_id("keys").locator("tr.revoked")).to_have_count(1)
    assert make_api().http.get("/jobs", headers={"Authorization": f"Bearer {token}"}).status_code == 401

    erin = f"erin-{tag}@example.com"
    page.get_by_label("email to invite").fill(erin)  # nobody is added until they accept; no password is set
    page.get_by_role("button", name="Invite").click()
    expect(page.get_by_test_id("invite-notice")).to_contain_text(f"Invited {erin}")
    pending = page.get_by_test_id("sent-invitations").locator("tbody tr", has_text=erin)
    expect(pending).to_have_count(1)
    expect(page.get_by_test_id("members")).not_to_contain_text(erin)
    page.get_by_role("button", name=f"revoke invitation of {erin}").click()
    expect(pending).to_have_count(0)
    assert api.get("/teams/current/invitations") == []

    page.locator("input[name=max_concurrent_jobs]").fill("5")
    page.get_by_role("button", name="Save quotas").click()
    expect(page.get_by_test_id("quotas")).to_contain_text("saved")
    assert api.get("/teams/current")["quotas"]["max_concurrent_jobs"] == 5
    shot(page, "20-team")


def test_planner_what_if(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    session = make_api().register(f"finn-{tag}@example.com", PASSWORD, f"team-plan-{tag}")
    open_signed_in(page, api_server, session["token"], "/planner")
    page.locator("input[name=count]").fill("16")
    page.get_by_role("button", name="Plan").click()
    plan = page.get_by_test_id("plan")
    # the form asks for sync; on 16 devices async simulates fastest: the plan recommends the fastest row of its
    # own table (it used to headline the requested, slower mode) and says how much slower the requested one is
    expect(plan).to_contain_text("Recommended: async")
    expect(plan.locator("tr.recommended")).to_have_count(1)
    expect(plan.locator("tr.recommended")).to_contain_text("async")
    rates = {mode: float(plan.get_by_test_id(f"plan-row-{mode}").locator("td.samples").inner_text())
             for mode in ("colocated", "sync", "async")}
    assert max(rates, key=lambda mode: rates[mode]) == "async", rates
    expect(plan.get_by_test_id("plan-best")).to_contain_text(f"{rates['async']:.2f}")
    expect(plan.get_by_test_id("plan-note")).to_contain_text("You asked for sync")
    expect(plan.get_by_test_id("plan-row-sync")).to_contain_text("requested")
    expect(plan.locator(".uplot")).to_have_count(3)
    expect(plan.get_by_test_id("timeline").locator(".lane").first).to_be_visible()
    axis = plan.get_by_test_id("timeline-axis")  # a simulated run reads forward from 0 s, never "−1153s"
    expect(axis.locator("span").first).to_have_text("0 s")
    assert all(re.fullmatch(r"\d+ s", label) for label in axis.locator("span").all_inner_texts()), axis.inner_text()
    shot(page, "30-planner")

    page.locator("input[name=median]").fill("99999")  # above max tokens: refused before planning
    page.get_by_role("button", name="Plan").click()
    median_field = page.locator(".field", has=page.locator("input[name=median]"))
    expect(median_field.locator(".field-error")).to_contain_text("cannot exceed max tokens")
    page.locator("input[name=median]").fill("2000")

    page.locator("input[name=count]").fill("0")
    page.get_by_role("button", name="Plan").click()
    expect(page.locator(".field", has=page.locator("input[name=count]")).locator(".field-error")).to_be_visible()


def test_sign_in_and_switch_team(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    hana = f"hana-{tag}@example.com"
    make_api().register(hana, PASSWORD, f"home-{tag}")
    other_owner = make_api()
    other_owner.register(f"ivan-{tag}@example.com", PASSWORD, f"lab-{tag}")
    other_owner.post("/teams/current/members", json={"email": hana, "role": "viewer"})  # an invitation: not attached

    page.goto(f"{api_server.url}/")
    page.locator("input[name=email]").fill(hana)
    page.locator("input[name=password]").fill("wrong-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_be_visible()  # a clear error, not a blank page
    page.locator("input[name=password]").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("whoami")).to_contain_text(f"{hana} · owner")

    switcher = page.get_by_label("team", exact=True)
    expect(switcher.locator("option")).to_have_count(1)  # invited, not yet a member
    expect(page.get_by_test_id("invitations-badge")).to_have_text("1")  # next to the Team link, on every page
    page.get_by_role("link", name="Team").click()
    invitations = page.get_by_test_id("my-invitations")
    expect(invitations).to_contain_text(f"lab-{tag}")
    expect(invitations).to_contain_text(f"ivan-{tag}@example.com")
    shot(page, "22-your-invitations")
    page.get_by_role("button", name=f"accept invitation to lab-{tag}").click()
    expect(page.get_by_test_id("joined-team")).to_contain_text(f"You joined team lab-{tag}")
    expect(switcher.locator("option")).to_have_count(2)  # the new team is in the switcher at once
    expect(page.get_by_test_id("invitations-badge")).to_have_count(0)
    switcher.select_option(label=f"lab-{tag}")
    expect(page.get_by_test_id("whoami")).to_contain_text(f"{hana} · viewer")
    page.get_by_role("link", name="Team").click()
    expect(page.get_by_role("heading", name=f"Team lab-{tag}")).to_be_visible()
    expect(page.get_by_role("button", name="Create key")).to_have_count(0)  # viewers cannot manage keys
    shot(page, "21-switched-team-viewer")


def test_submit_form_applies_planner_suggestion(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    session = make_api().register(f"jo-{tag}@example.com", PASSWORD, f"team-suggest-{tag}")
    open_signed_in(page, api_server, session["token"], "/submit")
    suggestion = page.get_by_test_id("plan-suggestion")
    suggestion.get_by_label("planner device count").fill("8")
    suggestion.get_by_role("button", name="Suggest").click()
    expect(suggestion).to_contain_text("generation instance(s)")
    instances = suggestion.locator("b").first.inner_text()
    training = suggestion.locator("b").nth(1).inner_text()
    suggestion.get_by_role("button", name="Apply").click()
    expect(page.locator("input[name=instances]")).to_have_value(instances)
    expect(page.locator("input[name=devices]")).to_have_value(training)
    shot(page, "31-submit-plan-suggestion")


def test_submit_form_sends_a_lora_job(page: Page, api_server: Server, make_api: MakeApi) -> None:
    """LoRA fields: rank 0 comes back as a 422 next to the rank; a valid adapter is submitted as training.lora."""
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"lee-{tag}@example.com", PASSWORD, f"team-lora-{tag}")
    api.post("/models", json={"name": "tiny-1m", "path": str(api_server.tiny_model_dir)})
    open_signed_in(page, api_server, session["token"], "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny-1m")
    page.locator("select[name=dataset_source]").select_option("builtin")
    expect(page.locator("input[name=lora_rank]")).to_have_count(0)  # full fine-tuning until LoRA is chosen
    page.locator("select[name=lora]").select_option("on")
    page.locator("input[name=lora_rank]").fill("0")
    page.get_by_role("button", name="Submit job").click()
    rank_field = page.locator(".field", has=page.locator("input[name=lora_rank]"))
    expect(rank_field.locator(".field-error")).to_contain_text("greater than or equal to 1")
    page.locator("input[name=lora_rank]").fill("8")
    page.locator("input[name=lora_target_modules]").fill("q_proj, v_proj")
    shot(page, "32-submit-lora")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    assert api.get(f"/jobs/{job_id}")["spec"]["training"]["lora"] == {
        "rank": 8, "alpha": 32.0, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    api.post(f"/jobs/{job_id}/cancel")


def test_a_failed_session_check_keeps_the_session_and_a_401_ends_it(
        page: Page, api_server: Server, make_api: MakeApi) -> None:
    """The dashboard's `/auth/me` at load failing for another reason than 401 (cut off by a reload, the server
    restarting) keeps the token, so the next load is signed in; a 401 (revoked) signs out."""
    tag = uuid.uuid4().hex[:8]
    session = make_api().register(f"rita-{tag}@example.com", PASSWORD, f"reload-{tag}")
    page.route("**/api/v1/auth/me", lambda route: route.abort())
    open_signed_in(page, api_server, session["token"], "/jobs")
    expect(page.locator("input[name=email]")).to_be_visible()  # no answer: not signed in now ...
    assert page.evaluate("() => localStorage.getItem('streamrl.token')") == session["token"]  # ... but not out
    page.unroute("**/api/v1/auth/me")
    page.reload()
    expect(page.get_by_test_id("whoami")).to_contain_text(f"rita-{tag}@example.com")
    page.route("**/api/v1/auth/me", lambda route: route.fulfill(status=401, json={"detail": "revoked"}))
    page.reload()
    expect(page.locator("input[name=email]")).to_be_visible()
    assert page.evaluate("() => localStorage.getItem('streamrl.token')") is None
