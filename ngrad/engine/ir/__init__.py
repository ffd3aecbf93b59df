"""The IR and its reference semantics: element types, the primitive table and its shape rules,
the tape, the lazy graph lowered to it, and the NumPy interpreter that is every other path's oracle."""
