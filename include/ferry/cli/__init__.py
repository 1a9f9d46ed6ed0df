"""The `ferry` command line."""
