"""Business logic as keyword-only functions over a SQLAlchemy session; framework-free (API and controller share it).

Functions raise `backend.services.errors.ServiceError` subclasses for user mistakes; the API turns them into HTTP
answers. Callers own the transaction: functions flush, never commit, so a refusal leaves nothing half-written.
"""
