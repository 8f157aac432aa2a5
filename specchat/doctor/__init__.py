"""``specchat doctor``: know before you chat whether this machine can run a profile.

Each check is a function returning a :class:`~specchat.doctor.checks.Check` (ok, warning
or fail, with the fix for a failure): the machine and its libraries (checks.py), the
profile's models and the memory they need (models.py), the data dir (checks.py), and
with ``--smoke`` a short greedy reply with speculation on and off (smoke.py).
report.py runs them in order and prints one line each. Nothing here downloads: a model
not on disk is a failure that says how to get it.
"""
