#!/usr/bin/env python3
"""A logging, fault-injecting HTTP proxy in front of a test registry (stdlib only), for
gguf-mount's OCI tests: it counts what a client asks a registry (Docker Hub counts manifest
GETs, not HEADs), answers rate limits and refusals as real registries do, and makes the
registry's blob redirects signed, expiring URLs as a CDN-backed registry's are.

  registry_proxy.py --upstream http://127.0.0.1:PORT --port-file F --log F --rules F
                    [--redirect-life S]

Every request is forwarded (method, path, query, headers, body) to --upstream and its answer
relayed, unless a rule of the rules file (JSON, re-read on every request: a list of rules) takes
it. A rule: {"match": TEXT (a substring of the path; "" = all), "method": "GET" (optional),
"fault": KIND, "skip": S, "times": N (-1 = every matching request)} with KIND:
  toomanyrequests  {"seconds": W, "retry_after": R, "limit": "100;w=21600"}: for W seconds from
                   the first request it answers, 429 with Retry-After: R (omitted when R < 0),
                   Docker Hub's headers ratelimit-limit: LIMIT, ratelimit-remaining: 0;w=...,
                   docker-ratelimit-source: 127.0.0.1, and its JSON body (TOOMANYREQUESTS)
  error            {"status": 403, "code": "DENIED", "message": "..."}: a distribution-spec error
With --redirect-life S, a 3xx answer of the registry gets CloudFront's signed-URL parameters
"Expires=NOW+S&Signature=N&Key-Pair-Id=gguf-test" added to its Location (N counts the
redirects), as Docker Hub's CDN URLs carry them: a CDN in front of the storage (fault_server.py's
"expires" rule) refuses it after S seconds.

Each request is one JSON line in the log (fault_server.py's fields: seq, port, method, uri,
status, range, authorization (as "present", never its value), user_agent; plus "fault").
Listens on 127.0.0.1 only.
"""
import argparse
import http.client
import http.server
import json
import sys
import threading
import time
import urllib.parse

import loopback

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "host", "content-length"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--rules", required=True)
    p.add_argument("--redirect-life", type=int, default=0)
    a = p.parse_args()
    up = urllib.parse.urlsplit(a.upstream)
    lock = threading.Lock()
    state = {"text": None, "rules": [], "uses": [], "first": {}, "seq": 0, "redirects": 0}

    def take_rule(path, method):
        try:
            with open(a.rules, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            text = "[]"
        with lock:
            if text != state["text"]:
                state["text"] = text
                state["rules"] = json.loads(text) if text.strip() else []
                state["uses"] = [0] * len(state["rules"])
                state["first"] = {}
            for i, rule in enumerate(state["rules"]):
                if rule.get("match", "") not in path or rule.get("method", method) != method:
                    continue
                state["uses"][i] += 1
                skip, times = rule.get("skip", 0), rule.get("times", -1)
                if state["uses"][i] <= skip or (times >= 0 and state["uses"][i] > skip + times):
                    continue
                if rule.get("fault") == "toomanyrequests":
                    first = state["first"].setdefault(i, time.monotonic())
                    if time.monotonic() - first >= float(rule.get("seconds", 3)):
                        continue
                return rule
        return None

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def log_entry(self, status, fault=""):
            with lock:
                with open(a.log, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"seq": self.seq, "port": str(self.server.server_address[1]),
                                        "method": self.command, "uri": self.path, "request": self.requestline,
                                        "status": str(status), "range": self.headers.get("Range", ""),
                                        "authorization": "present" if self.headers.get("Authorization") else "",
                                        "user_agent": self.headers.get("User-Agent", ""), "fault": fault}) + "\n")

        def send(self, status, headers, body, length=None):
            self.send_response_only(status)
            for k, v in headers:
                self.send_header(k, v)
            # A HEAD answer carries the length a GET's body would have.
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()

        def handle_any(self):
            with lock:
                state["seq"] += 1
                self.seq = state["seq"]
            path = urllib.parse.urlsplit(self.path).path
            n = int(self.headers.get("Content-Length", "0") or 0)
            body = self.rfile.read(n) if n else b""
            rule = take_rule(path, self.command)
            kind = rule.get("fault") if rule else ""
            if kind == "toomanyrequests":
                limit = rule.get("limit", "100;w=21600")
                window = limit.split(";", 1)[1] if ";" in limit else "w=21600"
                headers = [("Content-Type", "application/json"), ("ratelimit-limit", limit),
                           ("ratelimit-remaining", "0;" + window), ("docker-ratelimit-source", "127.0.0.1")]
                if int(rule.get("retry_after", 1)) >= 0:
                    headers.append(("Retry-After", str(rule.get("retry_after", 1))))
                doc = {"errors": [{"code": "TOOMANYREQUESTS", "message": "You have reached your pull rate limit."}]}
                self.send(429, headers, json.dumps(doc).encode())
                return self.log_entry(429, kind)
            if kind == "error":
                status = int(rule.get("status", 403))
                doc = {"errors": [{"code": rule.get("code", "DENIED"),
                                   "message": rule.get("message", "requested access to the resource is denied")}]}
                self.send(status, [("Content-Type", "application/json")], json.dumps(doc).encode())
                return self.log_entry(status, kind)
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers["Host"] = up.netloc
            conn.request(self.command, self.path, body=body if body else None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out = []
            for k, v in resp.getheaders():
                if k.lower() in HOP_BY_HOP:
                    continue
                if k.lower() == "location" and a.redirect_life > 0 and 300 <= resp.status < 400:
                    with lock:
                        state["redirects"] += 1
                        sig = state["redirects"]
                    v += ("&" if "?" in v else "?") + "Expires=%d&Signature=%d&Key-Pair-Id=gguf-test" % (
                        int(time.time()) + a.redirect_life, sig)
                out.append((k, v))
            length = resp.getheader("Content-Length") if self.command == "HEAD" else None
            conn.close()
            self.send(resp.status, out, data, length)
            self.log_entry(resp.status)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

    loopback.serve(Handler, a.port_file)


if __name__ == "__main__":
    sys.exit(main())
