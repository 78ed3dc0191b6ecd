import sys

from lamplighter.commands.cli import main

sys.exit(main())
