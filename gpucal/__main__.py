"""``python -m gpucal``: the ``gpucal`` command line, for environments without the console script."""

from gpucal.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
