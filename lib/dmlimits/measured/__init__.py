"""The model of measured training runs, behind the book's part "Meeting measured runs".

This subpackage confronts the cost model of Erdil & Schneider-Joseph (2024) with runs that were
measured (Fernandez et al. 2024 and other published runs):

- :mod:`~dmlimits.measured.transformer`: transformer shapes, parameters and FLOP with attention;
- :mod:`~dmlimits.measured.nccl`: the all-reduce bus bandwidth fitted to measurements;
- :mod:`~dmlimits.measured.runs`: the published runs, their configurations, and the step time
  and MFU the model predicts for them (bound and calibrated modes);
- :mod:`~dmlimits.measured.memory`: peak memory per GPU, and whether a run fits;
- :mod:`~dmlimits.measured.confront`: the comparisons the chapters print (errors in and out of
  sample, the hypotheses tested against Fernandez et al.).
- :mod:`~dmlimits.book.measured_figures`: the chapters' figures, drawn from what the modules above
  compute.
"""
