"""``python -m memdir`` and the ``memdir`` command.

``memdir hook ...`` runs once per event of an agent, so it goes straight to the hook
handler (:func:`memdir.agents.hooks.main`) without importing the command line's framework
and command tree; every other command, and ``memdir hook --help``, goes to :mod:`memdir.cli`.
"""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["hook"] and not {"-h", "--help"} & set(args[1:]):
        from .agents.hooks import main as hook

        raise SystemExit(hook(args[1:]))
    from .cli import main as cli

    cli()


if __name__ == "__main__":
    main()
