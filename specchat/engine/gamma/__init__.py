"""Choosing γ: the cost model, the controllers of one sequence, and the plan of a batch."""
