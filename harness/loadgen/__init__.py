"""The load generator: a workload's requests, sent over HTTP at absolute scheduled times.

`engine.run_load` is the lifecycle (schedule, send, record, wait); `client.OpenAIHttpTarget` speaks
the OpenAI API to any compatible server; `prompts.PromptBuilder` turns `hash_ids` into token-id
prompts; `records.RequestRecord` is one request's timestamps; `run` wires live and url runs.
"""
