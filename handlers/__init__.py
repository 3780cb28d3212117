"""Job handlers: plain functions registered with `@supervisor.handler`.

One module per business family (`handlers/demo.py` is the shipped example). List the
modules in `[supervisor] handlers` of the config; the daemon imports them before it
forks, so a module that fails to import stops the boot instead of every worker.
Handlers never import the master, the worker or the store.
"""
