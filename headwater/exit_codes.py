"""What the `headwater` command's exit status means; scripts and CI branch on these (docs/install.md lists them)."""

OK = 0
# Nothing was done, or it stopped: a configuration error, an unreachable service, a refused credential.
ERROR = 1
# A sync ran to the end but some documents failed (each named in the report); the others are indexed.
SOME_FAILED = 2
# The command line itself is wrong (a missing argument, an unknown option): sysexits.h's EX_USAGE,
# so it is never mistaken for SOME_FAILED, which is what click would have said.
USAGE = 64
