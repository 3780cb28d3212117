"""The pre-fork daemon, `forkq run`: the master, its children and their bookkeeping. Only
`forkq run` imports this package."""
