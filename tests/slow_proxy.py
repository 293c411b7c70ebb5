"""A slow network in front of a real server, for tests: a TCP proxy on a loopback port that holds every
chunk a client sends for ``delay_s`` before passing it on (answers come back unchanged), so each request
to the server behind it answers ``delay_s`` late. Runs its own event loop on a daemon thread.

    with SlowProxy(sim.port, delay_s=1.0) as proxy:
        httpx.get(f"{proxy.base_url}/health")   # about a second late
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

from tests.conftest import free_port


class SlowProxy:
    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the slow proxy did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(self._pipe(client_r, server_w, self.delay_s), self._pipe(server_r, client_w, 0))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await reader.read(65536):
                if delay_s:
                    await asyncio.sleep(delay_s)
                writer.write(chunk)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> SlowProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
