"""Planning and running: suites into plans (suite), cases run and timed into rows (runner),
and the far end of a peer benchmark with its wire protocol (peer, wire). Writes through
netbench.store; knows no verdict.
"""
