import sys

from tltsim.cli import main

sys.exit(main())
