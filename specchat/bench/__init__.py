"""``specchat bench``: whether speculation paid. Headless but for the Rich table (table.py)."""
