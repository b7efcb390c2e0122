import sys

from gradpick.cli import main

sys.exit(main())
