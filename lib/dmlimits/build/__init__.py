"""The build layer: executing the chapters, their caches, and the HTML step.

:mod:`~dmlimits.build.engine` builds the book; :mod:`~dmlimits.build.chapter_reads`,
:mod:`~dmlimits.build.kernel_fork`, :mod:`~dmlimits.build.jupyter_book_run` and
:mod:`~dmlimits.build.sphinxext` are the parts it runs.
"""
