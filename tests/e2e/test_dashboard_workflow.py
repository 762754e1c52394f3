"""The dashboard in a real browser against a real API: sign up, upload a dataset (and see a bad file's line error),
submit a job on the tiny model (and see a 422 next to its field), open the job, scale it, cancel it; a second team's
user sees none of it. Screenshots: test-artifacts/e2e/."""

from __future__ import annotations

import re
import uuid

import pytest
from e2e_support import PASSWORD, MakeApi, Server, shot
from playwright.sync_api import FilePayload, Page, expect

pytestmark = pytest.mark.e2e

GOOD_JSONL = b"".join(b'{"prompt": "%d+%d=", "answer": "%d"}\n' % (a, b, a + b) for a, b in [(1, 1), (2, 3), (4, 4)])
BAD_JSONL = b'{"prompt": "1+1=", "answer": "2"}\nthis is not json\n'


def sign_up(page: Page, server: Server, email: str, team: str) -> None:
    page.goto(f"{server.url}/")
    page.get_by_role("button", name=re.compile("Create an account")).click()
    page.locator("input[name=email]").fill(email)
    page.locator("input[name=password]").fill(PASSWORD)
    page.locator("input[name=team_name]").fill(team)
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_test_id("whoami")).to_contain_text(email)


def upload(page: Page, name: str, content: bytes) -> None:
    payload: FilePayload = {"name": name, "mimeType": "application/jsonl", "buffer": content}
    page.locator("input[name=dataset_file]").set_input_files(files=[payload])
    page.get_by_role("button", name="Upload", exact=True).click()


def test_team_workflow_and_isolation(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    alice = f"alice-{tag}@example.com"
    sign_up(page, api_server, alice, f"team-a-{tag}")
    shot(page, "01-jobs-empty")

    # Register the tiny model (Team page); the submit form offers the team's registered models.
    page.get_by_role("link", name="Team").click()
    page.get_by_placeholder("model name").fill("tiny-1m")
    page.get_by_placeholder("path on the server (under the artifact dir)").fill(str(api_server.tiny_model_dir))
    page.get_by_role("button", name="Register model").click()
    expect(page.get_by_test_id("models")).to_contain_text("tiny-1m")
    api = make_api()
    api.login(alice, PASSWORD)

    page.get_by_role("link", name="Submit job").click()
    expect(page.locator("select[name=model]")).to_have_value("tiny-1m")
    expect(page.locator("select[name=dataset_source]")).to_have_value("builtin")  # no dataset uploaded yet
    page.locator("select[name=dataset_source]").select_option("uploaded")

    upload(page, "bad.jsonl", BAD_JSONL)
    upload_error = page.locator(".upload .field-error")
    expect(upload_error).to_contain_text("line 2")
    expect(upload_error).not_to_contain_text("file.line")  # the line is named once, not as a field path too
    shot(page, "02-dataset-line-error")

    upload(page, "arith.jsonl", GOOD_JSONL)
    expect(page.locator(".upload .field-hint")).to_contain_text("3 rows")
    expect(page.locator("select[name=dataset] option:checked")).to_contain_text("arith")

    # A bad value comes back as a 422 whose message lands next to the field it names.
    page.locator("input[name=batch_size]").fill("0")
    page.locator("input[name=iterations]").fill("3")
    page.get_by_role("button", name="Submit job").click()
    batch_field = page.locator(".field", has=page.locator("input[name=batch_size]"))
    expect(batch_field.locator(".field-error")).to_contain_text("greater than or equal to 1")
    shot(page, "03-submit-field-error")

    page.locator("input[name=batch_size]").fill("8")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    expect(page.get_by_role("heading", name=re.compile("grpo-run"))).to_be_visible()
    expect(page.get_by_test_id("target-instances")).to_have_text("2")
    shot(page, "04-job-detail")

    page.get_by_role("button", name="scale up").click()
    expect(page.get_by_test_id("target-instances")).to_have_text("3")
    assert api.get(f"/jobs/{job_id}")["target_instances"] == 3
    expect(page.get_by_test_id("scaling-events").locator("li")).not_to_have_count(0)  # the change, with its reason
    expect(page.get_by_test_id("scaling-events")).not_to_contain_text("no scaling events")

    # Beyond the team's quota the API answers 403 naming the quota; the panel shows it.
    answer = api.http.patch("/teams/current/quotas", json={"max_generation_instances": 3})
    assert answer.status_code == 200, answer.text
    page.get_by_role("button", name="scale up").click()
    expect(page.locator(".scaling").get_by_role("alert")).to_contain_text("max_generation_instances")
    expect(page.get_by_test_id("target-instances")).to_have_text("3")
    shot(page, "04b-scaling-quota")

    page.once("dialog", lambda dialog: dialog.dismiss())  # cancel asks first; saying no keeps the job
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("status").first).not_to_have_text("cancelled")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("status").first).to_have_text("cancelled")
    expect(page.get_by_role("button", name="scale up")).to_be_disabled()
    shot(page, "05-job-cancelled")

    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.get_by_test_id("jobs-table")).to_contain_text("grpo-run")
    page.get_by_label("status filter").select_option("running")
    expect(page.get_by_test_id("jobs-table").locator("tbody tr")).to_have_count(0)
    page.get_by_label("status filter").select_option("cancelled")
    expect(page.get_by_test_id("jobs-table").locator("tbody tr")).to_have_count(1)
    shot(page, "05b-jobs-filtered")

    # A second team's user sees none of it: not in the list, not by URL, not over REST.
    page.get_by_role("button", name="Sign out").click()
    bob = f"bob-{tag}@example.com"
    sign_up(page, api_server, bob, f"team-b-{tag}")
    expect(page.get_by_test_id("jobs-table").locator("tbody tr")).to_have_count(0)
    page.get_by_role("link", name="Submit job").click()
    expect(page.locator("select[name=dataset_source]")).to_have_value("builtin")  # no dataset uploaded yet
    page.locator("select[name=dataset_source]").select_option("uploaded")
    expect(page.locator("select[name=dataset] option")).to_have_count(1)  # only the placeholder
    page.goto(f"{api_server.url}/#/jobs/{job_id}")
    expect(page.get_by_test_id("job-not-found")).to_contain_text(re.compile("not found", re.I))
    expect(page.get_by_role("link", name="Back to runs")).to_be_visible()  # a way back
    shot(page, "06-other-team-not-found")
    other = make_api()
    other.login(bob, PASSWORD)
    assert other.http.get(f"/jobs/{job_id}").status_code == 404
