"""The book layer: what the chapters render.

Glue (every number a page prints), the figures' style and the figures and tables of each
chapter, and the helpers that compose a page's computed sentences.  It imports from every layer
below; nothing below imports from it.
"""

# Every derivation a page renders prints how its premises are justified, which the premises
# layer renders and registers with the derivations when imported.
from dmlimits import premises  # noqa: F401
