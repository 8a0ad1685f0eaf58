//! The markdown workspace: the memory view written to plain files, and hand edits read back as tape events.
