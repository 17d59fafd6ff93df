"""The computer-use environment: a real browser, screenshots in, clicks and keys out.

See ``task.py`` (tasks, milestones, the oracle's script), ``browser.py`` (the sandboxed Chromium
and its isolation), ``env.py`` (``reset`` / ``step``), ``agents.py``, ``harness.py`` (the model
loop and rollouts as workloads) and ``run.py`` (``kvharness env web run``).
"""
