"""PTL profiling against the real `hf` engine, and the profile's JSON round trip / live refresh."""

import pytest
import torch

from contract.skew import PTLProfile, ptl_from_json, ptl_to_json, refresh_ptl
from workers.dispatch.ptl import measure_ptl


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from workers.generation.engines import setup_engine
    from workers.models.tiny import build_tiny_model

    torch.set_num_threads(1)
    model_dir = build_tiny_model("tiny-1m", tmp_path_factory.mktemp("tiny"))
    return setup_engine("hf", model_dir=model_dir, max_batch_size=4)


def test_measure_ptl_on_the_real_engine(engine):
    profile = measure_ptl(engine, [4, 1, 2], tokens=4, prompt_len=4)
    assert [bs for bs, _ in profile.points] == [1, 2, 4]
    assert all(0 < s < 5 for _, s in profile.points)


def test_measure_ptl_through_generate_stream(engine):
    class StreamOnly:  # an engine without profile_ptl: timed through generate_stream
        def generate_stream(self, requests):
            return engine.generate_stream(requests)

    profile = measure_ptl(StreamOnly(), [1, 2], tokens=4)  # type: ignore[arg-type]
    assert [bs for bs, _ in profile.points] == [1, 2]


def test_measure_ptl_rejects_bad_sizes(engine):
    with pytest.raises(ValueError, match="batch sizes"):
        measure_ptl(engine, [0])


def test_json_round_trip_and_refresh():
    profile = PTLProfile(((1, 0.01), (8, 0.02)))
    assert ptl_from_json(ptl_to_json(profile)) == profile
    refreshed = refresh_ptl(profile, 8, 0.03, weight=0.5)
    assert refreshed(8) == pytest.approx(0.025) and refreshed(1) == 0.01
    assert refresh_ptl(profile, 4, 0.5)(4) == 0.5


def test_profile_is_made_non_decreasing():
    class NoisyTimings:  # a smaller batch that measured slower than a larger one was disturbed by other load
        def profile_ptl(self, sizes, tokens, prompt_len):
            return {1: 0.012, 4: 0.011, 8: 0.005, 16: 0.006}

    profile = measure_ptl(NoisyTimings(), [1, 4, 8, 16])  # type: ignore[arg-type]
    assert profile.points == ((1, 0.005), (4, 0.005), (8, 0.005), (16, 0.006))
