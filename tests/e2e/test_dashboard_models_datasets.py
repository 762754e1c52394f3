"""Models and Datasets pages (issue 39): a new user, with only a browser, uploads a model archive from the Models
page (the same name again becomes its version 2, and version 1 is deleted from its row), then uploads a chat dataset
from the Datasets page (a second upload under the same name is refused) and previews it through the uploaded model's
chat template."""

from __future__ import annotations

import json
import tarfile
import uuid
from pathlib import Path

import pytest
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e


def model_archive(tmp_path: Path) -> Path:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path / "qwen")
    archive = tmp_path / "qwen-up.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(model_dir.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(model_dir)), recursive=False)
    return archive


def test_upload_a_model_archive_then_a_chat_dataset_and_preview_it(
    page: Page, api_server: Server, make_api: MakeApi, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    session = make_api().register(f"pages-{tag}@example.com", PASSWORD, f"team-pages-{tag}")
    open_signed_in(page, api_server, session["token"], "/jobs")

    page.get_by_role("link", name="Models", exact=True).click()
    archive = model_archive(tmp_path)
    page.locator("input[name=model_archive]").set_input_files(str(archive))
    page.locator("input[name=upload_model_name]").fill("qwen-up")
    page.get_by_role("button", name="Upload model").click()
    expect(page.get_by_test_id("model-upload-done")).to_contain_text("registered qwen-up v1 (ready)")
    expect(page.get_by_test_id("model-upload-progress")).to_contain_text("(100%)")
    row = page.get_by_test_id("model-qwen-up")
    expect(row).to_contain_text("ready")
    expect(row.get_by_test_id("model-card")).to_contain_text("chat template yes")
    shot(page, "39-models-page")
    # the same name uploaded again is its next version (listed newest first); the older one is deleted from its row
    page.locator("input[name=model_archive]").set_input_files(str(archive))
    page.locator("input[name=upload_model_name]").fill("qwen-up")
    page.get_by_role("button", name="Upload model").click()
    expect(page.get_by_test_id("model-upload-done")).to_contain_text("registered qwen-up v2 (ready)")
    expect(row.get_by_test_id("model-version")).to_contain_text("v2newest")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="delete qwen-up v1").click()
    expect(page.get_by_test_id("model-qwen-up-v1")).to_have_count(0)
    expect(row).to_contain_text("ready")  # v2 stays

    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{i}+1="},
                          {"role": "assistant", "content": str(i + 1)}]} for i in range(5)]
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page.get_by_role("link", name="Datasets", exact=True).click()
    page.locator("input[name=dataset_upload_file]").set_input_files(str(data))
    page.get_by_role("button", name="Upload dataset").click()
    expect(page.get_by_test_id("dataset-upload-done")).to_contain_text("uploaded chat: 5 rows")
    expect(page.get_by_test_id("dataset-chat")).to_contain_text("5")
    page.get_by_role("button", name="Upload dataset").click()  # the same name again: refused, nothing stored
    expect(page.get_by_role("alert").first).to_contain_text("a dataset named 'chat' already exists")
    expect(page.get_by_test_id("datasets").locator("tbody tr")).to_have_count(1)

    page.locator("select[name=preview_dataset]").select_option(label="chat (5 rows)")
    page.locator("select[name=preview_model]").select_option("qwen-up")
    page.get_by_role("button", name="Preview").click()
    preview = page.get_by_test_id("dataset-preview")
    expect(preview.get_by_test_id("preview-text").first).to_contain_text("<|im_start|>system\nBe brief.<|im_end|>")
    expect(preview).to_contain_text("chat template: yes")
    shot(page, "39-datasets-page")
