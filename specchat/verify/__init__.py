"""specchat verify: exactness checks of the engine on a profile's real models (one sequence and batched), their statistics and the exact-law reading."""
