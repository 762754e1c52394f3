"""The controller: reconcile loop (admission, instance targets, liveness, autoscaling). Never imports torch."""
