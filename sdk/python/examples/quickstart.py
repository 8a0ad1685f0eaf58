"""memtape from Python in a few lines: a private server from the bundled binary, a
conversation on the tape, memory, and search. Run: python examples/quickstart.py"""

import memtape

# The data directory and the model come from MEMTAPE_DATA_DIR / MEMTAPE_MODEL, else
# memtape's defaults (~/.local/share/memtape, MiniLM after `memtape models fetch`).
with memtape.Memtape.local() as m:
    m.sessions.append("chat-1", role="user", content="Hi, I am Ada. I prefer dark mode.")
    m.sessions.append("chat-1", role="assistant", content="Noted, Ada: dark mode it is.")
    m.memory.save("# Memory\n\n- Ada prefers dark mode.\n")

    for hit in m.search("what theme does Ada like?", limit=3).hits:
        print(f"{hit.score:.3f}  {hit.entry.payload.get('content')}")
    print(m.memory.show().text)
