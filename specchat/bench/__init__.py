"""``specchat bench``: whether speculation paid. Headless but for the Rich tables (report.py)."""
