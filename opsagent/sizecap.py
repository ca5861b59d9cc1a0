"""Upstream answers capped in size as they are read: every HTTP answer opsagent reads whole (a data
source's, a model server's) passes through :func:`size_cap`, so an upstream that answers 200 MB is
stopped at the cap instead of taking the process's memory.

It lives outside ``adapters`` because the model client (an engine module) reads through it too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx

#: The most one upstream answer may hold, as received (before decompression). An answer is read
#: whole before it is parsed, so without a cap a 200 MB answer takes the process to a gigabyte.
MAX_ANSWER_BYTES = 32 * 1024 * 1024


class BodyTooLarge(Exception):
    """An answer passed :data:`MAX_ANSWER_BYTES` (or a source's own cap) while it was read; raised by
    :func:`size_cap`'s stream; the adapters translate it into :class:`~opsagent.errors.AnswerTooLarge`."""

    def __init__(self, limit: int, url: str) -> None:
        super().__init__(f"the answer from {url} passed {limit:,} bytes; reading stopped there")
        self.limit = limit


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, *, limit: int, url: str) -> None:
        self._stream = stream
        self._limit = limit
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise BodyTooLarge(self._limit, self._url)
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


def size_cap(limit: int = MAX_ANSWER_BYTES) -> Callable[[httpx.Response], Awaitable[None]]:
    """An httpx response hook that stops reading an answer at ``limit`` bytes: one that says it is
    larger is refused before its body is read, one that does not say is counted as it streams in.
    (httpx calls response hooks before it reads the body, so the cap holds for every request.)"""

    async def cap(response: httpx.Response) -> None:
        url = str(response.request.url.copy_with(query=None))
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await response.aclose()
            raise BodyTooLarge(limit, url)
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _CappedStream(response.stream, limit=limit, url=url)

    return cap
