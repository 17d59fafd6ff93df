"""``python -m kvharness.env.tasks {build,verify}``: see :mod:`kvharness.env.tasks.cli`."""

import sys

from kvharness.env.tasks.cli import main

sys.exit(main())
