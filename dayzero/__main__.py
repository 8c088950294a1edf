"""`python -m dayzero ...`: the same commands as `dayzero ...`."""

from dayzero.cli import main

main()
