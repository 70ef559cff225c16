"""Tests of jobs/: job files, selection, prompts, validation, the LLM client and the `webqa` commands."""
