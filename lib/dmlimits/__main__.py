import sys

from dmlimits.cli import main

sys.exit(main())
