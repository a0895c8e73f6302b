"""Repository-level conftest: enables ``pytester`` for the plugin's own tests (tests/)."""

pytest_plugins = ["pytester"]
