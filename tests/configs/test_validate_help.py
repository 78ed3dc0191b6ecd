"""`lamplighter init --custom` points at `validate --help` for trainer.command's placeholders (newcomer
review P2-4: that page listed none). Pure."""

from __future__ import annotations

import argparse

from lamplighter.commands import validate as validate_cli
from lamplighter.configs.schema import TRAINER_PLACEHOLDERS


def test_validate_help_lists_every_trainer_command_placeholder() -> None:
    root = argparse.ArgumentParser(prog="lamplighter")
    sub = root.add_subparsers()
    validate_cli.add_parser(sub)
    text = sub.choices["validate"].format_help()
    missing = [k for k in TRAINER_PLACEHOLDERS if "{" + k + "}" not in text]
    assert not missing and "placeholders" in text, missing
