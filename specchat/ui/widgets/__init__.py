"""Widgets of the chat screen; each file holds one."""
