"""The async client: many writes at once, each stored exactly once. Run against a server
(`memtape serve`, or MEMTAPE_URL / MEMTAPE_API_KEY), or start one: python examples/async_client.py"""

import asyncio

import memtape


async def main() -> None:
    async with memtape.AsyncMemtape.local() as m:
        await asyncio.gather(
            *(
                m.sessions.append("notes", role="user", content=f"idea {i}: a garden on the roof")
                for i in range(10)
            )
        )
        history = await m.sessions.history("notes")
        print(len(history.messages), "messages")
        hits = await m.search("roof garden", session="notes", limit=2)
        print([h.entry.payload["content"] for h in hits.hits])


asyncio.run(main())
