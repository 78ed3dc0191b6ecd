"""`python -m lamplighter.trainer --config PATH`."""

from lamplighter.trainer.main import main

if __name__ == "__main__":
    raise SystemExit(main())
