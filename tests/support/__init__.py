"""Helpers shared by test files: pages, fixtures and command runners. Test files import from here,
never from each other, so that a test file can be read, moved or deleted on its own."""
