//! Dify's node memory: a conversation's history kept per workflow node, thread-aware.
