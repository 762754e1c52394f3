"""Keep transformers from importing scikit-learn into every process that loads a model.

transformers imports `sklearn.metrics` whenever scikit-learn is installed (`generation/candidate_generator.py`: it
tunes assisted generation's candidate threshold with `roc_curve`), which costs ~140 MB of RSS per process (measured:
574 MB after importing a model class with it, 433 MB without). The platform never runs assisted generation, and
scikit-learn is present only as another tool's dependency (mlflow's, a dev dependency, which `scripts/setup.sh`
installs). Call `skip_sklearn_in_transformers()` before the first import of a transformers model class; the worker
entry points do (streamrl/worker.py, streamrl/cli/train_cmds.py).
"""

from __future__ import annotations

import sys

CANDIDATE_GENERATOR = "transformers.generation.candidate_generator"  # the module that reads is_sklearn_available


def skip_sklearn_in_transformers() -> bool:
    """Make transformers see scikit-learn as absent; False when its generation modules were imported already (too
    late to matter, and left as they are)."""
    if CANDIDATE_GENERATOR in sys.modules:
        return False
    import transformers.utils  # every reader imports the check from here (`from ..utils import ...`)

    def unavailable() -> bool:
        return False

    transformers.utils.is_sklearn_available = unavailable
    return True
