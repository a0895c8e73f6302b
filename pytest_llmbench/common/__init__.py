"""The ground floor every layer shares: the request contract (``records``: ``RequestSpec`` in,
``RequestRecord`` out), the run store (``storage``: ``records.jsonl`` and atomic writes), named seed
streams (``seeds``) and tokenization (``tokenizer``, §4.4). Imports nothing else of the package."""
