"""Tape to code: fusion into kernels and glue, Python source for loop nests and CUDA kernels, and the
bytecode tier; each long transformation is a list of named passes (``passes``)."""
