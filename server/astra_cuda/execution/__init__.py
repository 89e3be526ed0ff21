"""Execution: where kernel code runs, never in the caller's process — the worker process
(`worker`), the jobs it runs (`jobs`, its only entry point, the one place a backend is picked),
the gate then the profiler on one candidate (`evaluator`), where jobs run (`executors`: this
machine's pool or a Ray cluster) and which backend runs here (`availability`)."""
