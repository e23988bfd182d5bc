"""prfaas-harness: trace-driven benchmarking of cross-datacenter PD-disaggregated LLM serving."""

__version__ = "0.1.0"
