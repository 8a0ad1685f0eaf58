//! The context an agent sends its LLM, built from a session, its memory and the tape.
