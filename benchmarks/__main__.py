import sys

from benchmarks.bench import main

sys.exit(main())
