"""prfaas-harness: trace-driven benchmarking of cross-datacenter PD-disaggregated LLM serving."""

import sys as _sys

__version__ = "0.1.0"

# A command (`python -m harness...` or a `harness*` console script) stops cleanly on SIGINT/SIGTERM
# from its first moment, imports included; a library user's signals are left alone.
if _sys.argv and (_sys.argv[0] == "-m" or _sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1].startswith("harness")):
    from harness.errors import install_early_signal_handlers

    install_early_signal_handlers()
