"""Planning and running: suites into plans (suite), cases run and timed into rows (runner),
what the run and fabric commands share around a run (session: the plan from a target, the
store, the env, resume), and the far end of a peer benchmark with its wire protocol (peer,
wire). Writes through netbench.store; knows no verdict.
"""
