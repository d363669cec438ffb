"""Fixtures of the tracing tests: a real OTLP/HTTP receiver (tests/otlp_receiver.py)."""

from tests.otlp_receiver import receiver

__all__ = ["receiver"]
