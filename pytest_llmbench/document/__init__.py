"""The results document (``results.json``): the format (``schema``), the builder that turns a
session's results into it (``build``), its headline and plot data (``headline``, ``plotdata``).
Every figure a report shows is computed here, before ``report/`` renders it."""
