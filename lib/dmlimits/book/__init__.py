"""The book layer: what the chapters render.

Glue (every number a page prints), the figures' style and the figures and tables of each
chapter, and the helpers that compose a page's computed sentences.  It imports from every layer
below; nothing below imports from it.
"""
