"""The command line: parser.py maps arguments and errors to exit codes; commands.py
(what every command shares; run, web, work), jobs.py, overview.py and checks.py do;
tables.py prints."""
