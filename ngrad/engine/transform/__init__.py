"""Tape-to-tape transformations: differentiation (vjp, jvp, joint and split tapes) and batching."""
