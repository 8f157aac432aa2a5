"""Screens: the chat, the token inspector and help."""
