"""mmtoken: max-margin token selection in attention, as an executable book.

Modules: :mod:`config` (size switch, device, seeds), :mod:`model`,
:mod:`losses`, :mod:`grad` (saturation-safe gradients), :mod:`train`,
:mod:`svm`, :mod:`geometry`, :mod:`instances`, :mod:`embedding`,
:mod:`tokens`, :mod:`plotting`, :mod:`ledger` and :mod:`experiments`.
"""
__version__ = "0.1.0"
