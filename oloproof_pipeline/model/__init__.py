"""Pure data and loading: the project files, cases, copies, trajectories, records, outcomes and digests. Imports nothing else of the package."""
