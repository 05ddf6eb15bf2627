"""Serving math: how a GPU (or a parallel group, or a fleet of them) serves a load, from the evaluated numbers.

``capacity``: the batch a workload can hold (KV fit, sub-batch bound), the most requests/s it serves, and the
overload and SLA-miss texts (``overload_message``, ``sla_miss``).
``server``: the Poisson-server state (idle/busy power mix, the batch at the offered load) of each row.
``solve``: the Little's-law concurrency of Poisson-server rows, bracketed on the capacity grid and finished by
Illinois (regula falsi) steps: arrays in, arrays out; one row of floats is the same steps.
``latency``: TTFT's queue, prefill and step terms, and the Erlang-C slot wait.
``fleet``: replicas with headroom for a target load.

What it may import: numpy and the runtime's data and leaf modules (features, physics, parallel, specs, workload,
prediction, targets, assemble's types, rules, errors, ops); never the CLI, the service, ranking or calibration.
"""
