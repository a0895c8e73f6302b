"""The metrics, one function each, found by directory (``registry._discover``; docs/metrics.md).

Each module holds one family; each metric is a vectorised function decorated with
:func:`pytest_llmbench.measure.registry.metric`: the decorator is its declaration, the docstring its
definition, the parameters what it reads. Modules whose name starts with ``_`` are helpers.
"""
