"""kvharness: benchmark, route, simulate and train coding agents on KV-cache-aware serving.

The package is organised as a pure core (``workload``, ``engine``, ``routing``, ``report``) free of
I/O and clocks, driven in virtual time by ``sim`` and in wall time by ``bench`` and ``gateway``.
See docs/modules.md for the module map.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
