"""Built-in benchmarks. Each module imports only netbench.api; registration is by entry point."""
