"""Example evaluation projects, shipped inside the package for `oloproof init --example`."""
