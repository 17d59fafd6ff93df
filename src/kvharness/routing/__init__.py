"""routing: where each request goes, written once for the simulator and the live gateway.

Pure: a policy reads no clock (``now`` is passed in) and does no I/O, so the object that wins in
the simulator is the one that routes live traffic.

Modules:

* :mod:`~kvharness.routing.base` — the interface: ``RouteRequest``, ``ReplicaState``,
  ``Decision`` and ``Policy`` (which picks one of the eligible replicas it is offered).
* :mod:`~kvharness.routing.index` — the prefix index (block hash -> replicas), fed by KV events
  or by the router's own decisions.
* :mod:`~kvharness.routing.policies` — the built-in policies, one module each: round robin,
  least outstanding, session hashing, SGLang cache-aware, Dynamo KV, llm-d precise prefix, and
  kvharness's own ``agent_aware``.
* :mod:`~kvharness.routing.registry` — policies by name (``make_policy``, ``available_policies``,
  ``register_policy``), the same names in the simulator, the gateway and the CLI.
"""
