"""The draft's procedures 5.1–5.10 as pytest tests, shipped with the plugin.

Run them where the plugin is installed, without copying::

    pytest --pyargs pytest_llmbench.suites --llm-endpoint http://host:port/v1
    pytest --pyargs pytest_llmbench.suites -k ttft          # one procedure (5.1)

or write a copy to adapt into your repository with ``python -m pytest_llmbench init``. The SLOs
asserted here are examples: set your own thresholds. This checkout's ``suites/`` is the same folder.
"""
