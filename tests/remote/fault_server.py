#!/usr/bin/env python3
"""HTTP/1.1 test server with injectable faults (stdlib only), for gguf-mount's remote tests.

Usage: fault_server.py ROOT RULES_FILE PORT_FILE ACCESS_LOG [PORT [HOST]]

Serves the files under ROOT on HOST (default 127.0.0.1; any 127.0.0.0/8 address) (on PORT, or when it is absent or 0 on a port the kernel
chooses; written to PORT_FILE once listening) with keep-alive, HEAD, ETag and single-range Range requests (RFC 9110 14.1.2:
"bytes=a-b", "bytes=a-", "bytes=-n"; an unsatisfiable range gets 416 with "Content-Range: bytes
*/SIZE"; several ranges are answered with the whole body, as a server may).

RULES_FILE is re-read on every request: {"generation": G, "rules": [RULE, ...]} (or a bare
array of rules), each {"path": "/x" or "*", "query": TEXT (optional: only requests whose query
string contains TEXT, e.g. one signed URL's signature),
"fault": KIND, "skip": S (default 0), "times": N (default -1 = every matching request), ...}:
the rule lets its first S matching requests through, then applies to the next N. Rules are
tried in order and each counts the matching requests it sees; the first that applies wins and
the rules after it do not see that request. A rule with "method" applies to that method only
("HEAD"); one with "range_from": N only to ranged requests whose first byte is at N or later.
Kinds: stall (seconds, after_bytes), drop (after_bytes), status (status), retry_after
(seconds), etag (etag), ignore_range, redirect (location), no_validators (the file is served
without ETag and Last-Modified, as some servers do), drip (bytes_per_second: the body
is sent that slowly), gzip (the answer carries "Content-Encoding: gzip" and a gzip stream cut
or padded to the asked length), rate_limit (seconds, t, bucket: every matching request within
`seconds` of the first one it answers gets 429 with only "RateLimit: "BUCKET";r=0;t=T" and
"RateLimit-Policy", no Retry-After, as the Hub sends), expires (status, default 403: a request
whose query has Expires=T (CloudFront's signed URLs), T in seconds since the epoch, after T, as a signed CDN URL past its
life is answered; others are served). Counters restart whenever the file's
content changes (a new generation).

Every request is appended to ACCESS_LOG as one JSON line with the same fields nginx's log has
in tests/remote/servers.cpp, plus "seq", the request's arrival number (lines are written when a
response ends, also one the client hung up on, so concurrent requests may be logged out of
arrival order).
"""

import email.utils
import gzip
import http.server
import json
import os
import re
import socketserver
import sys
import threading
import time
import urllib.parse

ROOT, RULES_FILE, PORT_FILE, ACCESS_LOG = sys.argv[1:5]
PORT = int(sys.argv[5]) if len(sys.argv) > 5 else 0
HOST = sys.argv[6] if len(sys.argv) > 6 else "127.0.0.1"
if not HOST.startswith("127."):
    sys.exit("fault_server.py: HOST must be a loopback address (127.0.0.0/8)")

_lock = threading.Lock()
_rules_text = None
_rules = []
_uses = []
_seq = 0


def range_start(header):
    """The first byte a "bytes=a-b" Range asks for, or None."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d+)\s*-.*", header or "")
    return int(m.group(1)) if m else None


def take_fault(path, query="", method="GET", rng=None):
    """Returns the rule that applies to this request (consuming one use) or None."""
    global _rules_text, _rules, _uses
    try:
        with open(RULES_FILE, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = "[]"
    with _lock:
        if text != _rules_text:
            _rules_text = text
            doc = json.loads(text) if text.strip() else []
            _rules = doc["rules"] if isinstance(doc, dict) else doc
            _uses = [0] * len(_rules)
        for i, rule in enumerate(_rules):
            if rule.get("path", "*") not in ("*", path):
                continue
            if rule.get("query", "") not in query:
                continue
            if rule.get("method", method) != method:
                continue
            if "range_from" in rule:
                start = range_start(rng)
                if start is None or start < int(rule["range_from"]):
                    continue
            times = rule.get("times", -1)
            skip = rule.get("skip", 0)
            _uses[i] += 1
            if _uses[i] <= skip or (times >= 0 and _uses[i] > skip + times):
                continue
            return rule
    return None


def parse_range(header, size):
    """(start, end_inclusive) for one satisfiable range, "unsatisfiable", or None (serve all)."""
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    if m.group(1) == "":
        n = int(m.group(2))
        if n == 0:
            return "unsatisfiable"
        return (max(0, size - n), size - 1)
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) != "" else size - 1
    if start >= size or end < start:
        return "unsatisfiable"
    return (start, min(end, size - 1))


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gguf-fault/1"

    def log_message(self, *args):
        pass

    def log_request(self, code="-", size="-"):
        pass

    def _log(self, status, body_bytes, header_bytes):
        entry = {
            "seq": self._seq,
            "port": str(self.server.server_address[1]),
            "method": self.command,
            "uri": self.path,
            "request": self.requestline,
            "status": str(status),
            "range": self.headers.get("Range", ""),
            "authorization": self.headers.get("Authorization", ""),
            "accept_encoding": self.headers.get("Accept-Encoding", ""),
            "user_agent": self.headers.get("User-Agent", ""),
            "bytes_sent": str(body_bytes + header_bytes),
            "body_bytes_sent": str(body_bytes),
        }
        with _lock:
            with open(ACCESS_LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def _head(self, status, headers):
        self.send_response_only(status)
        self.send_header("Date", email.utils.formatdate(usegmt=True))
        for k, v in headers:
            self.send_header(k, v)
        n = sum(len(b) for b in self._headers_buffer) + 2  # + the blank line
        self.end_headers()
        self.wfile.flush()
        return n

    def _simple(self, status, extra=(), body=b""):
        headers = list(extra) + [("Content-Length", str(len(body))), ("Content-Type", "text/plain")]
        hb = self._head(status, headers)
        if self.command != "HEAD":
            self.wfile.write(body)
        self._log(status, 0 if self.command == "HEAD" else len(body), hb)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        global _seq
        with _lock:
            _seq += 1
            self._seq = _seq
        split = urllib.parse.urlsplit(self.path)
        path = split.path
        rule = take_fault(path, split.query, self.command, self.headers.get("Range"))
        kind = rule.get("fault") if rule else None
        if kind == "rate_limit":
            with _lock:
                first = rule.setdefault("_first", time.monotonic())
            if time.monotonic() - first < float(rule.get("seconds", 4)):
                bucket = rule.get("bucket", "api")
                self._simple(429, [("RateLimit", '"%s";r=0;t=%d' % (bucket, int(rule.get("t", 3)))),
                                   ("RateLimit-Policy", '"fiveminutes";q=500;w=300')], b"rate limited\n")
                return
            kind = None
        if kind == "expires":
            expires = urllib.parse.parse_qs(split.query).get("Expires", [""])[0]
            if expires.isdigit() and int(expires) < time.time():
                self._simple(int(rule.get("status", 403)), body=b"Request has expired\n")
                return
            kind = None
        if kind == "stall" and "after_bytes" not in rule:
            time.sleep(float(rule.get("seconds", 1)))
        if kind == "status":
            self._simple(int(rule.get("status", 503)), body=b"injected status\n")
            return
        if kind == "retry_after":
            self._simple(429, [("Retry-After", str(rule.get("seconds", 1)))], b"slow down\n")
            return
        if kind == "redirect":
            self._simple(302, [("Location", rule["location"] + self.path)])
            return
        local = os.path.join(ROOT, urllib.parse.unquote(path).lstrip("/"))
        real = os.path.realpath(local)
        if not (real == os.path.realpath(ROOT) or real.startswith(os.path.realpath(ROOT) + os.sep)) \
                or not os.path.isfile(real):
            self._simple(404, body=b"not found\n")
            return
        st = os.stat(real)
        size = st.st_size
        etag = rule["etag"] if kind == "etag" else '"%x-%x"' % (int(st.st_mtime), size)
        headers = [("Accept-Ranges", "bytes"), ("Content-Type", "application/octet-stream")]
        if kind != "no_validators":
            headers += [("ETag", etag), ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))]
        status, start, end = 200, 0, size - 1
        rng = self.headers.get("Range")
        if rng and kind != "ignore_range":
            r = parse_range(rng, size)
            if r == "unsatisfiable":
                self._simple(416, [("Content-Range", "bytes */%d" % size)])
                return
            if r is not None:
                status, (start, end) = 206, r
                headers.append(("Content-Range", "bytes %d-%d/%d" % (start, end, size)))
        length = end - start + 1 if size > 0 else 0
        headers.append(("Content-Length", str(length)))
        if kind == "gzip":
            headers.append(("Content-Encoding", "gzip"))
        hb = self._head(status, headers)
        sent = 0
        if self.command == "GET" and kind == "gzip":
            with open(real, "rb") as f:
                f.seek(start)
                body = gzip.compress(f.read(length))
            body = (body + b"\0" * length)[:length]
            self.wfile.write(body)
            self._log(status, len(body), hb)
            return
        if self.command == "GET" and kind == "drip":
            pause = 1.0 / float(rule.get("bytes_per_second", 1))
            with open(real, "rb") as f:
                f.seek(start)
                try:
                    while sent < length:
                        self.wfile.write(f.read(1))
                        self.wfile.flush()
                        sent += 1
                        time.sleep(pause)
                except OSError:  # the client gave up
                    pass
            self.close_connection = True
            self._log(status, sent, hb)
            return
        if self.command == "GET":
            limit = length
            if kind in ("drop", "stall") and "after_bytes" in rule:
                limit = min(length, int(rule["after_bytes"]))
            try:
                with open(real, "rb") as f:
                    f.seek(start)
                    while sent < limit:
                        chunk = f.read(min(65536, limit - sent))
                        if not chunk:
                            break
                        self.wfile.write(chunk)
                        sent += len(chunk)
                self.wfile.flush()
            except OSError:  # the client hung up (a cut-short whole answer): still logged
                self.close_connection = True
                self._log(status, sent, hb)
                return
            if kind == "drop":
                self._log(status, sent, hb)
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if kind == "stall" and "after_bytes" in rule:
                time.sleep(float(rule.get("seconds", 1)))
                with open(real, "rb") as f:
                    f.seek(start + sent)
                    rest = f.read(length - sent)
                self.wfile.write(rest)
                sent += len(rest)
        self._log(status, sent, hb)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    server = Server((HOST, PORT), Handler)
    tmp = PORT_FILE + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
