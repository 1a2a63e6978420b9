"""`python -m benchmarks`: run the benchmark driver (see `benchmarks/README.md`)."""

from benchmarks.driver import main

raise SystemExit(main())
