"""verifiers jobs from the submit form, without a worker: for environment 'verifiers' the form shows the module's
code (a starting template the API accepts as it stands), its requirements one per line and its params; the API's
422s show on the field in use (`environment`: the code, or the params of an installed taskset; a requirement the
package index lacks: the requirements); the stored spec holds what the form sent, and a clone fills the fields back
and resubmits the same environment."""

from __future__ import annotations

import re

import pytest
from e2e_runs import new_team
from e2e_support import Server, fill_name_and_arithmetic, open_signed_in
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e


def test_submit_form_sends_and_clones_a_verifiers_environment(page: Page, api_server: Server) -> None:
    world = new_team(api_server, "vfform")
    open_signed_in(page, api_server, world.token, "/submit")
    expect(page.locator("select[name=model]")).to_have_value("tiny")
    fill_name_and_arithmetic(page, "my-vf")
    page.locator("select[name=environment]").select_option("verifiers")
    fields = page.get_by_test_id("verifiers-fields")
    code = fields.locator("textarea[name=environment_code]")
    expect(code).to_have_value(re.compile(r'^__all__ = \["Problems", "CheckAgain"\]$', re.MULTILINE))
    template = code.input_value()

    code.fill(template.replace("class Problems(vf.Taskset[Problem]):",
                               "class Problems(vf.Taskset[Problem]):\n    def toolsets(self):\n        return []\n"))
    page.get_by_role("button", name="Submit job").click()  # the API's 422 at `environment`, on the code box
    expect(fields.locator(".field-error")).to_contain_text("MCP Toolset servers")

    code.fill(template)
    requirements = fields.locator("textarea[name=environment_requirements]")
    requirements.fill(" no-such-vf-helpers==1.0\n\nnumpy\n")  # resolved on the package index at submit
    fields.locator("textarea[name=environment_params]").fill("concurrency: 2")
    page.get_by_role("button", name="Submit job").click()
    unresolved = re.compile(r"requirements\[0\] 'no-such-vf-helpers==1.0': no matching")
    expect(fields.locator(".field-error")).to_have_text(unresolved)
    expect(fields.locator(".field-error")).to_have_count(1)  # on the requirements box only

    requirements.fill(" numpy\n\n")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(r"#/jobs/\d+$"))
    job_id = int(page.url.rsplit("/", 1)[1])
    source = world.api.get(f"/jobs/{job_id}")["spec"]
    assert source["agent"] is None
    assert {k: source["environment"][k] for k in ("type", "code", "requirements", "params", "url")} == {
        "type": "verifiers", "code": template, "requirements": ["numpy"],
        "params": {"concurrency": 2}, "url": None}

    open_signed_in(page, api_server, world.token, f"/submit?from={job_id}")
    expect(page.locator("input[name=name]")).to_have_value("my-vf-clone")
    fields = page.get_by_test_id("verifiers-fields")
    expect(fields.locator("textarea[name=environment_code]")).to_have_value(template)
    expect(fields.locator("textarea[name=environment_requirements]")).to_have_value("numpy")
    expect(fields.locator("textarea[name=environment_params]")).to_have_value(re.compile(r'"concurrency": 2'))

    fields.locator("select[name=environment_source]").select_option("installed")  # no taskset: the 422 on params
    expect(fields.locator("textarea[name=environment_code]")).to_have_count(0)
    page.get_by_role("button", name="Submit job").click()
    expect(fields.locator(".field-error")).to_contain_text("params.taskset")

    fields.locator("select[name=environment_source]").select_option("code")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(re.compile(rf"#/jobs/(?!{job_id}$)\d+$"))
    clone = world.api.get(f"/jobs/{int(page.url.rsplit('/', 1)[1])}")["spec"]
    assert clone == {**source, "name": "my-vf-clone"}
