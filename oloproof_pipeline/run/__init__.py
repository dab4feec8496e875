"""Running the system under test: building it, its tool box, the sandbox runner, Dask fan-out, and recording and replaying cases incrementally."""
