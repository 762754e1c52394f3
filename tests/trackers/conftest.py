"""`mlflow_server`: one real `mlflow server` per module (it takes seconds to start), stopped at the end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tracker_servers import MlflowServer


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module", autouse=True)
def wandb_service_stopped() -> Iterator[None]:
    """After the module, the wandb-core service its runs started is stopped: it otherwise lives as long as this
    xdist worker (seen using ~15% of a core for the rest of the fast part)."""
    yield
    import sys

    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()
