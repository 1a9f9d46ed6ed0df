"""Helpers the tests share (real clusters' data, secured clusters' rights, the built
wheel): a test module imports them from here."""
