"""Keeping the target's shape in step with the source: pure diffs (source state + target
state + settings -> actions), one module per concern; adapters apply them."""
