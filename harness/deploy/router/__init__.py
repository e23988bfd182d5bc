"""Routing policies: which cluster prefills a request. One module and one YAML (conf/router/) each."""
