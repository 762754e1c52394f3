"""HTTP layer: FastAPI routers under /api/v1, dependencies, error translation, metrics and static files."""
