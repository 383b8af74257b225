"""The e2e suite: run with ``pytest -m e2e e2e/tests`` or ``e2e/ci.sh``."""
