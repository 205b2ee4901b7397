"""The costs layer: each cost of Erdil & Schneider-Joseph (2024) derived in sympy, and the
numerics derived from those derivations.

A cost module derives (a :class:`~dmlimits.core.derivation.Derivation` per cost), and turns the
result into the vectorised functions the search calls.  It never draws and never glues: the
book's figures of these costs live in :mod:`dmlimits.book`.
"""
