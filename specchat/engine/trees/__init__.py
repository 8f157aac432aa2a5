"""Draft trees: growing them (grow.py, eagle.py) and walking them by recursive rejection sampling (walk.py)."""
