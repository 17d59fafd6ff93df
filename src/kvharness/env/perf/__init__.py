"""Performance-engineering tasks: make a slow but correct function faster, results unchanged.

* :mod:`~kvharness.env.perf.task` — a task on disk (reference, statement, hidden inputs, oracle).
* :mod:`~kvharness.env.perf.grading` — correctness on seeded hidden cases, then the candidate
  timed against the reference in fresh sandboxed processes on the grader's clock, scored from the
  speedup's confidence interval (:mod:`~kvharness.env.perf.stats`); ``_runner.py`` is the side of
  the exchange that runs in the sandbox.
* :mod:`~kvharness.env.perf.suite` — the bundled tasks (``tasks/``) laid out as a suite;
  :mod:`~kvharness.env.perf.verify` grades each task's oracle, reference and slower solution.

A performance task goes through the coding environments' episode API (``CodingEnv``,
``AsyncCodingEnv``), agents, harness and adapters unchanged: only its grader differs.
"""
