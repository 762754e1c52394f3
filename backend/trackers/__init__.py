"""Experiment trackers (MLflow, Weights & Biases, TensorBoard), fed by the control plane from recorded iteration rows.

The runtime never sees a tracker: the controller's watch loop (backend/controller/watch.py) reads each job's iteration
rows and mirrors them to the job's trackers (`sync.py`), with the team's credentials (stored encrypted, never
returned by the API). A tracker that is down stalls nothing: the rows wait in the database and are sent when it is
back (docs/architecture.md#alerts-and-experiment-trackers).
"""
