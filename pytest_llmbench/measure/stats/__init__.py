"""Statistics (§5.1.4.3, §5.3.4, §5.9.4, §6.3): one package, three modules.

* :mod:`.core` — estimates with confidence intervals, sample-size rules, fits (the names the package gives);
* :mod:`.significance` — is a change between two runs real: bootstrap and Student-t CIs of the
  change (the regression gate's estimators, also the document's 5.7/5.10 differences);
* :mod:`.runs` — figures over repeated or stored runs: across-run summaries, change points.

``from pytest_llmbench.measure.stats import …`` gives the names of :mod:`.core`, as before the
package was split; the other two modules are imported by name.
"""

from .core import *  # noqa: F403 - every public name of core, importable here as before the split
from .core import __all__  # noqa: F401
