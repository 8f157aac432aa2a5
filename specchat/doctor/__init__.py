"""``specchat doctor``: know before you chat whether this machine can run a profile. Each
check returns a :class:`~specchat.doctor.checks.Check`; nothing here downloads."""
