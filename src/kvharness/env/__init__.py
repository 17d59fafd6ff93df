"""env: RL environments for coding agents, built around the real task.

A task is a real package's repository with one injected bug and hidden tests that judge a fix;
an episode runs the agent's commands in a sandbox, scores each submission as it comes (partial
credit) and rewards the episode from its submissions.

Modules:

* :mod:`~kvharness.env.task` — a task; :mod:`~kvharness.env.tasks` builds suites of them from real
  packages (AST mutations, verification).
* :mod:`~kvharness.env.api` — the environment: ``reset()`` / ``step(action)``, sync and async;
  :mod:`~kvharness.env.actions` — its typed actions and their OpenAI tool schemas.
* :mod:`~kvharness.env.sandbox` — bubblewrap (no network, read-only system, writable repository);
  :mod:`~kvharness.env._save` — files back from it as one bounded tar stream.
* :mod:`~kvharness.env.workspace`, :mod:`~kvharness.env.scan`, :mod:`~kvharness.env.grading` — what
  grading takes from the agent's repository, the static scan of its change, and grading against
  the hidden tests with canaries.
* :mod:`~kvharness.env.perf` — performance tasks: make a slow, correct function faster; graded
  by correctness on seeded hidden inputs and a speedup measured against the reference in fresh
  processes on the grader's clock, through the same episode API, sandbox and adapters.
* :mod:`~kvharness.env.web` — the computer-use environment: small local web apps in a sandboxed
  headless Chromium, screenshots in, mouse and keyboard actions out, scored by hidden checks of
  the app's state (ordered milestones for partial credit); its rollouts are multimodal workloads.
* :mod:`~kvharness.env.reward` — episode reward rules over submissions.
* :mod:`~kvharness.env.harness` — the agent loop and rollout recording (rollouts are workloads for
  bench and sim); :mod:`~kvharness.env.adapters` — Gymnasium and verifiers-style adapters.
"""
