#!/bin/sh
# Regenerate every committed results file for one device in one run:
# benchmarks/run_all.py (its --help says how).
exec "${PYTHON:-python}" "$(dirname "$0")/run_all.py" "$@"
