"""The results document (``results.json``): the format (``schema``), the builder that turns a
session's results into it (``build``: generate, then the update hooks, then finish), one procedure's
entry (``procedure``), the tests (``outcomes``), the Minimum Viable Report (``mvr``), its headline and
plot data (``headline``, ``plotdata``), secrets (``redact``) and the CSV exports (``exports``).
Every figure a report shows is computed here, before ``report/`` renders it."""
