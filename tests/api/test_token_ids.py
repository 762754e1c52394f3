"""Issue 36, finding 3, at the API: token ids outside the served model's vocabulary (2^31 - 1, or negative) in a
Tinker `sample` / `compute_logprobs` request are a 400 naming the position, before anything reaches the shared
inference instance (tests/integration/test_inference_isolation.py: the instance refuses them alone too)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from backend.db.models import Team, User
from backend.services.auth import new_api_key


def asample(url: str, key: str, tokens: list[Any], **params: Any) -> httpx.Response:
    body = {"base_model": "tiny", "num_samples": 1, "prompt": {"chunks": [{"type": "encoded_text", "tokens": tokens}]},
            "sampling_params": {"max_tokens": 4, **params}}
    return httpx.post(f"{url}/tinker/api/v1/asample", headers={"X-API-Key": key}, json=body, timeout=30)


@pytest.mark.parametrize(("tokens", "params", "named"), [
    ([1, 2, 2**31 - 1], {}, "prompt token 2 is 2147483647, outside the model's vocabulary (token ids 0 to 3)"),
    ([1, 4], {}, "prompt token 1 is 4, outside the model's vocabulary (token ids 0 to 3)"),
    ([1, -5], {}, "prompt.chunks[0].tokens[1] = -5 is not a token id"),
    ([1, 2], {"stop": [1, 99]}, "sampling_params.stop[1] is token 99, outside the model's vocabulary"),
])
def test_token_ids_outside_the_vocabulary_are_400_naming_the_position(
        pg_backend: Any, world: Any, live_server: str, tokens: list[int], params: dict[str, Any], named: str) -> None:
    with pg_backend.session() as session:  # the world's model `tiny` has a vocabulary of 4 (tests/minimal_model.py)
        key = new_api_key(session=session, team=session.get(Team, world.team.id),
                          creator=session.get(User, world.users["member"].id), name="tinker",
                          scopes=["read", "write"])[1]
    answer = asample(live_server, key, tokens, **params)
    assert answer.status_code == 400, answer.text
    assert named in answer.json()["detail"], answer.text
