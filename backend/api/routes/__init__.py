"""One router per resource; `backend.main` includes them under /api/v1."""
