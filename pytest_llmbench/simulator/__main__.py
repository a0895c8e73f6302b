"""``python -m pytest_llmbench.simulator``: run the simulated OpenAI-compatible server."""

import sys

from .server import main

sys.exit(main())
