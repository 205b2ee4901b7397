"""dmlimits: the library behind the executable book *Data Movement Limits*.

Every formula, constant, scenario and figure helper of the book lives here; the notebooks only
render what this package computes.  See the README for the layout.
"""

__version__ = "0.1.0"
