import sys

from netbench.cli import main

sys.exit(main())
