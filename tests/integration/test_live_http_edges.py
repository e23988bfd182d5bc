"""Bodies the live server cannot take, or cannot find: an announced Content-Length over `server.max_body_bytes`
is refused at once (413, without waiting for the body), and an HTTP/1.0 POST without Content-Length (whose
body the standard says is empty: what follows is bad data, answered 400 by aiohttp's parser) is answered and
recorded, with one warning line instead of a traceback."""

from __future__ import annotations

import asyncio
import logging
import socket

from harness.live.server import start_server


async def _exchange(url: str, data: bytes, *, close_write: bool) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    if close_write:
        writer.transport.get_extra_info("socket").shutdown(socket.SHUT_WR)
    try:
        return await asyncio.wait_for(reader.read(), 20)  # a hang guard, not a timing assert
    finally:
        writer.close()


def _serve_and_send(cfg, data: bytes, close_write: bool) -> tuple[bytes, list[dict]]:
    rows: list[dict] = []

    async def main():
        server = await start_server(cfg, port=0)
        server.engine.record_sink = rows.append
        try:
            return await _exchange(server.url, data, close_write=close_write)
        finally:
            await server.stop()

    return asyncio.run(main()), rows


def test_an_over_limit_content_length_is_refused_before_the_body(compose_cfg, caplog):
    """Before: the server waited for a body it would refuse, until the client gave up (here: no answer)."""
    cfg = compose_cfg(["server.max_body_bytes=65536"])
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000000\r\nX-Request-Id: big\r\n\r\n")
    with caplog.at_level(logging.WARNING):
        answer, rows = _serve_and_send(cfg, head + b'{"prompt": "a', close_write=False)  # the rest never comes
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer
    assert [(r["client_id"], r["http_status"], r["refused"]) for r in rows] == [("big", 413, True)]
    assert not [r for r in caplog.records if r.exc_info]


def test_an_http_1_0_post_without_content_length_is_answered_and_recorded(compose_cfg, caplog):
    """Before: a traceback in the server log, and no row."""
    request = (b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n\r\n"
               b'{"prompt": [1, 2, 3], "max_tokens": 2}')
    with caplog.at_level(logging.WARNING):
        answer, rows = _serve_and_send(compose_cfg([]), request, close_write=False)
    assert answer.startswith(b"HTTP/1.0 400"), answer[:200]
    assert [(r["http_status"], r["refused"]) for r in rows] == [(400, True)]
    assert "malformed HTTP request" in rows[0]["error"]
    assert not [r for r in caplog.records if r.exc_info]
    assert any("malformed HTTP request answered 400" in r.getMessage() for r in caplog.records)
