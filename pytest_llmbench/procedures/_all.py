"""Imports every procedure module so that each registers itself (base.register)."""
