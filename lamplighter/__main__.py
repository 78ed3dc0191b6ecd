import sys

from lamplighter.cli import main

sys.exit(main())
