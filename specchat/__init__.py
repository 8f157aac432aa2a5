"""specchat: terminal chat with exact speculative decoding and live telemetry."""

__version__ = "0.1.0"
