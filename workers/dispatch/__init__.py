"""Skewness-aware dispatch (DESIGN §2.3): output-length ranker, Algorithm-2 instance split, LPT order, skew metrics."""
