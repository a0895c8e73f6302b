"""vLLM (CPU) as a real SUT for the plugin's own tests: :mod:`.server` builds the environment, the model and runs it."""
