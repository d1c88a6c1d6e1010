"""Several worker processes serving one project on shared ports (server.yml `workers`).

`supervisor.py` runs in the process `grps-py serve` started: it picks the ports, starts the workers
(each a whole server, `grps-py serve` again with the worker options), restarts one that dies and
forwards SIGTERM. `group.py` is a worker's view of the others: the shared traffic switch, and a unix
socket per worker over which one worker asks the others for their metrics and series and hands them
repository operations. `merge.py` adds the workers' metrics up into one server's.
"""
