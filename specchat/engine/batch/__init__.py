"""Several sequences decoded together: the batched engine, its request queue and its server loop."""
