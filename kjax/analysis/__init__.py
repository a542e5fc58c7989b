"""Norm-based attention analysis (METHODS §3, Kobayashi et al. 2020): how much
each token contributes to each attention output, ‖α_ij f(x_j)‖, next to the
attention weight α_ij, per head and per layer; `kjax analyze` runs it on a
checkpoint (see docs/ANALYSIS.md)."""
