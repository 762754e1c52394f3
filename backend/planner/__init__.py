"""Resource planner, cluster simulator and autoscaler policy. Pure Python: never imports torch.

See docs/architecture.md#resource-allocation and docs/architecture.md#elastic-scaling.

- `devices`, `costmodel`: device catalog, model shapes, roofline PTL(BS) and training cost.
- `lengths`, `sim_generation`, `simulator`, `timeline`: discrete-event simulation of an RL job.
- `allocation`: paper Algorithm 1.
- `service.make_plan`, `service.suggest_instances`: what the API, CLI and runtime call.
- `autoscaler.decide`: the controller's scaling policy.
"""
