"""Reading stored results back for people: the case panel, the HTML report, exports, violations and version comparisons."""
