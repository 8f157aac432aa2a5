"""Draft heads on the target's own hidden states (EAGLE-3, Medusa), a checkpoint.Head each."""
