"""``python -m pytest_llmbench.gate compare|history``."""

import sys

from .cli import main

sys.exit(main())
