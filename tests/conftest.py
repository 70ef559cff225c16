"""Shared pytest wiring: fixtures live in their own modules and are registered here."""

pytest_plugins = [
    "tests.fake_ollama",
    "tests.site_server",
]
