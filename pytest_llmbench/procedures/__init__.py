"""The draft's ten benchmarking procedures (§5.1–§5.10), one module each; see base.py."""
