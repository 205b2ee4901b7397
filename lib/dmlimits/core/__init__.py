"""The core layer: what every other layer stands on.

Units, the book's symbols and their printing, derivations and their checks, scenarios (the
assumptions a build is made for), the GPUs' hardware, the published values and the plumbing the
caches share (:mod:`~dmlimits.core.plumbing`).  Nothing here imports from a layer above.
"""
