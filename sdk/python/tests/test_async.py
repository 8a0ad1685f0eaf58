"""`AsyncMemtape`: the same API with `async` methods, and concurrent writes that each store
once."""

from __future__ import annotations

import asyncio

import pytest

import memtape


def test_the_async_client_appends_searches_and_raises_like_the_sync_one(client, session):
    async def run() -> None:
        async with memtape.AsyncMemtape(client.base_url, client.api_key) as m:
            await asyncio.gather(
                *(
                    m.sessions.append(session, role="user", content=f"note {i} about gardening")
                    for i in range(64)
                )
            )
            history = await m.sessions.history(session)
            assert sorted(msg.content for msg in history.messages) == sorted(
                f"note {i} about gardening" for i in range(64)
            )
            hits = await m.search("gardening", session=session, limit=5)
            assert len(hits.hits) == 5
            with pytest.raises(memtape.NotFoundError):
                await m.sessions.history("no-such-session-async")

    asyncio.run(run())


def test_async_local(tmp_path):
    async def run() -> None:
        m = memtape.AsyncMemtape.local(tmp_path / "data", model="none")
        async with m:
            await m.memory.save("# Memory\n\n- async works\n")
            assert "async works" in (await m.memory.show()).text
        assert m._server.process.poll() == 0

    asyncio.run(run())
