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
