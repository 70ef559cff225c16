"""Scenarios across all three packages: real pages crawled, questions answered and checked."""
