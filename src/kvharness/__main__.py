from kvharness.cli import main

raise SystemExit(main())
