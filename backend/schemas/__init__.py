"""Pydantic schemas shared by the control plane and the workers (no torch imports here)."""
