//! Session lifecycle: nanobot's /new (archive, then clear) and daily-note retention on start.
