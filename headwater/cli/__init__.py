"""The `headwater` command line: each command group in its own module, the typer app in app.py.

common holds what every command shares (consoles, common options, settings and source
resolution); fleet holds the fleet's commands (worker, beat, runs, retry, cancel); consolidate and
push their own commands. The console script is `headwater.cli.app:app`; `python -m headwater.cli`
runs the same app.
"""
