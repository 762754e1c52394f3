"""Prompt and sample streams on Redis Streams (consumer groups, ack after use, reclaim, idempotent ids)."""

from workers.stream.base import PromptQueueBase, SampleStreamBase
from workers.stream.redis_streams import PromptQueue, PromptRequest, SampleStream, clear_job, expire_job

__all__ = ["PromptQueue", "PromptQueueBase", "PromptRequest", "SampleStream", "SampleStreamBase", "clear_job",
           "expire_job"]
