"""The command line: parser.py maps arguments and errors to exit codes, commands.py does,
tables.py prints."""
