"""Project-wide test configuration: pytester for the plugin's integration tests."""

pytest_plugins = ("pytester",)
