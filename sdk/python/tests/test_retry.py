"""Retries never store twice: a write whose answer is lost on the way back is sent again
with the same idempotency key, and the server answers it from its record. A read is
retried too; a failure that retrying cannot fix is raised at once."""

from __future__ import annotations

import httpx
import pytest

import memtape


class LosesFirstAnswers(httpx.HTTPTransport):
    """A network that delivers each request but loses the first `n` answers."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        response = super().handle_request(request)
        if self.left > 0:
            self.left -= 1
            response.read()
            raise httpx.ReadError("connection reset by peer", request=request)
        return response


def test_a_write_whose_answer_was_lost_is_stored_once(client, session):
    transport = LosesFirstAnswers(2)
    flaky = memtape.Memtape(
        client.base_url, client.api_key, http_client=httpx.Client(transport=transport), max_retries=3
    )
    appended = flaky.sessions.append(session, role="user", content="exactly once")
    assert len(transport.sent) == 3, "two lost answers, then the replayed one"
    keys = {r.headers["idempotency-key"] for r in transport.sent}
    assert len(keys) == 1, "every attempt carried the same key"
    history = client.sessions.history(session)
    assert [m.content for m in history.messages] == ["exactly once"]
    assert appended.ids == [client.sessions.entries(session).entries[0].id]


def test_when_retries_run_out_the_connection_error_is_raised(client, session):
    transport = LosesFirstAnswers(10)
    flaky = memtape.Memtape(
        client.base_url, client.api_key, http_client=httpx.Client(transport=transport), max_retries=1
    )
    with pytest.raises(memtape.APIConnectionError):
        flaky.sessions.append(session, role="user", content="lost twice")
    assert len(transport.sent) == 2
    # It was stored once (the first attempt), never twice.
    assert [m.content for m in client.sessions.history(session).messages] == ["lost twice"]


def test_an_error_answer_is_not_retried(client):
    transport = LosesFirstAnswers(0)
    m = memtape.Memtape(client.base_url, client.api_key, http_client=httpx.Client(transport=transport))
    with pytest.raises(memtape.NotFoundError):
        m.sessions.history("no-such-session-retry")
    assert len(transport.sent) == 1


def test_a_server_without_a_model_is_not_asked_again(client, session):
    transport = LosesFirstAnswers(0)
    m = memtape.Memtape(client.base_url, client.api_key, http_client=httpx.Client(transport=transport))
    client.sessions.append(session, role="user", content="hello")
    with pytest.raises(memtape.InternalServerError) as e:
        m.sessions.extraction(session)
    assert e.value.code == "no_model"
    assert len(transport.sent) == 1


def test_the_url_and_key_come_from_the_environment(client, monkeypatch):
    monkeypatch.setenv("MEMTAPE_URL", client.base_url)
    monkeypatch.setenv("MEMTAPE_API_KEY", client.api_key)
    assert memtape.Memtape().health().status == "ok"
    monkeypatch.setenv("MEMTAPE_API_KEY", "wrong")
    with pytest.raises(memtape.AuthenticationError) as e:
        memtape.Memtape().sessions.list()
    assert e.value.status_code == 401 and e.value.code == "unauthorized"
