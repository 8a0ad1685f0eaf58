//! The context builder: the prompt an agent sends to its LLM, assembled from the system prompt, agent files, memory and history within a token budget (MateClaw and Qanot compaction).
