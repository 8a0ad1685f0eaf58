//! The memory tools (Bub, Anthropic memory_20250818, MateClaw workspace, Qanot memory_search): one registry with JSON schemas.
