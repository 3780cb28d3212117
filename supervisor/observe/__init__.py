"""Metrics and health: what the daemon tells Prometheus and a load balancer.

`metrics` holds the recording functions the master and the workers call (no-ops while
`[metrics]` is off); `server` the process that answers scrapes; `collect` what it reads;
`shared` the two things the master hands it (a pulse in shared memory, the last check
in a file); `health` the pure decision behind `/healthz`.
"""
