"""Helpers the suites share: ``differential`` (a program under python and under ppy run)."""
