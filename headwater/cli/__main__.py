"""`python -m headwater.cli`: the same app as the `headwater` console script."""

from headwater.cli.app import main

main()
