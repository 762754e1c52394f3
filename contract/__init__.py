"""The contract between the control plane (`backend`) and the data plane (`workers`).

Both sides import this package; it imports neither of them, nor torch. It holds what they must agree on: the
`JobSpec` and its choices, `Sample` and `PromptRequest`, Redis key names, Celery queue and task names, settings,
liveness timeouts, the paper's algorithms both the planner and the runtime use (`skew`), and the `Reporter`
interface through which the runtime tells the control plane what happened (docs/architecture.md).
"""
