"""Entry points that put the platform together: the `streamrl` CLI and the Celery worker application.

This is the only package allowed to import both the control plane (`backend`) and the data plane (`workers`):
it binds the runtime to the database reporter (`streamrl.worker`) and offers commands for both sides (`streamrl.cli`).
"""
