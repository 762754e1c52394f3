"""Dataset rows (contract/prompt_rows.py): plain and chat prompts, the OpenAI `messages` form, errors naming the
column."""

from __future__ import annotations

import pytest

from contract.prompt_rows import RowError, normalize_row, prompt_display, with_system_prompt

USER = {"role": "user", "content": "12+35="}


def test_messages_row_splits_the_final_assistant_turn_into_the_answer() -> None:
    row = {"messages": [{"role": "system", "content": "Be brief."}, USER, {"role": "assistant", "content": "47"}],
           "level": 2}
    assert normalize_row(row) == {"prompt": [{"role": "system", "content": "Be brief."}, USER], "answer": "47",
                                  "level": 2}
    assert normalize_row({**row, "answer": "forty-seven"})["answer"] == "forty-seven"  # an answer column wins
    assert normalize_row({"messages": [USER]}) == {"prompt": [USER]}  # no reference answer
    assert row["messages"][-1]["role"] == "assistant", "the input is not changed"


def test_plain_and_chat_prompts_and_the_system_column() -> None:
    assert normalize_row({"prompt": "1+1=", "answer": "2"}) == {"prompt": "1+1=", "answer": "2"}
    assert normalize_row({"prompt": [USER], "system": "Sys"})["prompt"] == [{"role": "system", "content": "Sys"}, USER]
    own = [{"role": "system", "content": "Mine"}, USER]
    assert normalize_row({"prompt": own, "system": "Sys"})["prompt"] == own
    assert with_system_prompt([USER], "Spec")[0] == {"role": "system", "content": "Spec"}
    assert with_system_prompt(own, "Spec") == own and with_system_prompt([USER], None) == [USER]
    assert prompt_display(own) == "12+35=" and prompt_display("x") == "x"


@pytest.mark.parametrize("row, column, reason", [
    ({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}, "messages",
     "no user turn"),
    ({"messages": []}, "messages", "non-empty list"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages", "role 'robot'"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages", "string `content`"),
    ({"messages": [USER], "prompt": "x"}, "messages", "not both"),
    ({"prompt": "  "}, "prompt", "non-empty string"),
    ({"question": "x"}, "prompt", "needs `prompt`"),
    ({"prompt": "x", "system": "s"}, "system", "chat prompts only"),
    ({"prompt": [USER], "system": 5}, "system", "must be a string"),
    ([1, 2], "(row)", "JSON object"),
])
def test_bad_rows_name_the_column(row: object, column: str, reason: str) -> None:
    with pytest.raises(RowError, match=reason) as err:
        normalize_row(row)
    assert err.value.column == column
