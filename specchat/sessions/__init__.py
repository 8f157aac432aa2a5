"""Recorded sessions: the crash-safe recorder, torch-free replay, exports and history.

A recording is JSON Lines of :mod:`specchat.events` (see :mod:`.fileformat`), so
replay, export and history run on machines where torch is not installed. Nothing in
this package imports torch, transformers, textual or rich at module level.
"""
