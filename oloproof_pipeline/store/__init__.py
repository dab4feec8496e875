"""What the pipeline writes under `.oloproof/`: table schemas, the Parquet layout and journals, defined once (the IO manager uses them too)."""
