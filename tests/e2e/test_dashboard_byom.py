"""Bring your own model in a browser: register a BPE chat model by path and see its card; preview a `messages`
dataset rendered with that model's chat template, with the prompt-length histogram in its tokens; register a Hub
dataset split from the submit form (the server's Hub endpoint is a local file server, tests/e2e/conftest.py)."""

from __future__ import annotations

import json
import tarfile
import uuid

import pytest
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e


def test_register_a_chat_model_and_preview_a_chat_dataset(page: Page, api_server: Server, make_api: MakeApi) -> None:
    from workers.models import build_tiny_model

    tag = uuid.uuid4().hex[:8]
    model_dir = build_tiny_model("chat-qwen2-1m", api_server.data_dir / "artifacts" / "models" / f"qwen-{tag}")
    api = make_api()
    session = api.register(f"byom-{tag}@example.com", PASSWORD, f"team-byom-{tag}")
    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"{i}+1="},
                          {"role": "assistant", "content": str(i + 1)}]} for i in range(5)]
    api.post("/datasets", data={"name": "chat"},
             files={"file": ("chat.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())})
    open_signed_in(page, api_server, session["token"], "/team")

    page.locator("input[name=model_name]").fill("qwen-chat")
    page.locator("input[name=model_path]").fill(f"models/{model_dir.name}")
    page.get_by_role("button", name="Register model").click()
    card = page.get_by_test_id("model-qwen-chat").get_by_test_id("model-card")
    expect(card).to_contain_text("Qwen2ForCausalLM")
    expect(card).to_contain_text("chat template yes")
    expect(card).to_contain_text("vocab 1024")
    expect(page.get_by_test_id("model-qwen-chat")).to_contain_text("ready")
    with page.expect_download() as info:  # the version's directory as a tar, from its row
        page.get_by_role("button", name="download qwen-chat v1").click()
    assert info.value.suggested_filename == "qwen-chat-v1.tar"
    with tarfile.open(info.value.path()) as archive:
        config = archive.extractfile("qwen-chat-v1/config.json")
        assert config is not None and config.read() == (model_dir / "config.json").read_bytes()

    page.locator("select[name=preview_dataset]").select_option(label="chat (5 rows)")
    page.locator("select[name=preview_model]").select_option("qwen-chat")
    page.get_by_role("button", name="Preview").click()
    preview = page.get_by_test_id("dataset-preview")
    expect(preview.get_by_test_id("preview-text").first).to_contain_text("<|im_start|>system\nBe brief.<|im_end|>")
    expect(preview.get_by_test_id("preview-text").first).to_contain_text("<|im_start|>assistant")
    expect(preview).to_contain_text("chat template: yes")
    expect(preview).to_contain_text("(5 rows)")
    expect(preview.locator("canvas, svg").first).to_be_visible()  # the histogram
    shot(page, "40-byom")


def test_register_a_hub_dataset_from_the_submit_form(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    session = make_api().register(f"hubdata-{tag}@example.com", PASSWORD, f"team-hubdata-{tag}")
    open_signed_in(page, api_server, session["token"], "/submit")
    expect(page.locator("select[name=dataset_source]")).to_have_value("builtin")  # no dataset yet
    page.locator("select[name=dataset_source]").select_option("uploaded")
    form = page.get_by_test_id("dataset-from-hub")
    form.locator("input[name=dataset_hub_id]").fill("acme/e2e-chats")
    form.locator("input[name=dataset_hub_split]").fill("validation")
    form.get_by_role("button", name="Register").click()
    expect(form).to_contain_text("no files for split 'validation' in acme/e2e-chats; splits found: train")
    form.locator("input[name=dataset_hub_split]").fill("train")
    form.locator("input[name=dataset_hub_name]").fill("hub-chats")
    form.get_by_role("button", name="Register").click()
    expect(form).to_contain_text("imported hub-chats: 3 rows")
    expect(page.locator("select[name=dataset] option:checked")).to_have_text("hub-chats (3 rows)")
    expect(page.locator("select[name=dataset]")).to_contain_text("e2e-chats-validation (failed)")
