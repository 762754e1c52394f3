"""Skewness-aware dispatch: output-length ranker, Algorithm-2 instance split, LPT order, skew metrics."""
