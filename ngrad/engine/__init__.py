"""The engine, one module per pipeline stage, in processing order:

1. ``dtypes``        element types and PyTorch's promotion rules
2. ``prims``         the primitive table: forward expression, shape rule and VJP per primitive
3. ``graph``         the lazy graph the facade records (``Node``) and its lowering to a tape
4. ``tape``          the flat SSA IR: build, verify, print, parse
5. ``differentiate`` tape -> joint (forward + reverse) tape
6. ``batch``         tape -> tape over a stack of inputs (vmap of a leading axis)
7. ``interpret``     the NumPy reference interpreter (the oracle)
8. ``runtime``       validated execution of a tape; the compiled targets plug in here
9. ``realize``       computing pending nodes: lower + run

The engine never imports the facade (``ngrad.tensor``, ``ngrad.autograd``).
"""
