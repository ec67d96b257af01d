"""The listening part the OCI test servers share: a threading HTTP server on 127.0.0.1 (only)
on a port the kernel chooses, written to a file once listening (written whole: the test polls
for it)."""
import http.server
import os


def serve(handler, port_file):
    """Serves `handler` (a BaseHTTPRequestHandler class) forever on 127.0.0.1:0; the port goes
    to `port_file` (via a temporary file and a rename)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()
