"""Adapters that let existing RL stacks drive the coding environments.

* :mod:`.gym`: a Gymnasium ``Env`` registered as ``kvharness/CodingEnv-v0`` (needs the ``gym``
  extra: ``pip install 'kvharness[gym]'``).
* :mod:`.verifiers`: the multi-turn tool environment interface of verifiers-style trainers
  (``setup_state`` / ``env_response`` / ``is_completed`` / ``rollout`` and a rubric), with no
  dependency on the ``verifiers`` package itself.
"""
