#!/usr/bin/env python3
"""A forward proxy for https:// through HTTP CONNECT (RFC 9110 section 9.3.6), for the remote
tests only: listens on 127.0.0.1 on a port it picks, writes that port to PORT_FILE, tunnels
CONNECT requests to 127.0.0.1 / localhost only (any other target gets 403: a test never reaches
another address) and logs each CONNECT as a JSON line {"target": "HOST:PORT", "status": N}.

Usage: connect_proxy.py PORT_FILE LOG_FILE
"""
import asyncio
import json
import sys

ALLOWED_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def log(path, target, status):
    with open(path, "a") as f:
        f.write(json.dumps({"target": target, "status": status}) + "\n")


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def handle(reader, writer, log_path):
    try:
        request = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    parts = request.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(parts) != 3 or parts[0] != "CONNECT":
        writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        log(log_path, parts[1] if len(parts) > 1 else "", 405)
        return
    target = parts[1]
    host, _, port = target.rpartition(":")
    if host not in ALLOWED_HOSTS or not port.isdigit():
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        log(log_path, target, 403)
        return
    try:
        up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
    except OSError:
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        log(log_path, target, 502)
        return
    writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
    await writer.drain()
    log(log_path, target, 200)
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def main():
    port_file, log_path = sys.argv[1], sys.argv[2]
    server = await asyncio.start_server(lambda r, w: handle(r, w, log_path), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    import os
    os.rename(port_file + ".tmp", port_file)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
