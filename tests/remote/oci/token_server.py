#!/usr/bin/env python3
"""Test token service for docker-registry's token auth (Docker's "Token Authentication
Specification"): GET /token?service=S&scope=repository:NAME:pull answers
{"token", "access_token", "expires_in", "issued_at"} with an RS256 JWT signed by a throw-away key
(openssl makes it; its self-signed certificate is the registry's auth.token.rootcertbundle and
travels in the JWT's x5c header).

  token_server.py --dir DIR --port-file F [--users u:p,...] [--private repo,...] [--expires-in S]
                  [--early S] [--refresh-tokens TOKEN:user,...] [--rotate]

POST /token (the OAuth2 form Docker sends for an identity token: grant_type=refresh_token,
refresh_token, service, scope, client_id) answers {"access_token", "expires_in", "scope"} for a
refresh token of --refresh-tokens (as its user), 401 for another; with --rotate it also answers
a new "refresh_token" (TOKEN-r1, TOKEN-r1-r1, ...) and accepts only the newest of each user.

Anonymous requests get pull on every repository not listed in --private; --users' Basic
credentials get pull everywhere. --early moves exp that many seconds before the expires_in said
(registry 2.8 accepts a token up to 60 s past exp), except for a scope ending in ",push". Each request is one JSON line in
DIR/token.log (method, path, scope, whether it had credentials, the user, the grant type and
client_id: never the password or a token).
Listens on 127.0.0.1 only.
"""
import argparse
import base64
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

import loopback


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Keys:
    def __init__(self, d):
        self.key = os.path.join(d, "token.key")
        self.cert = os.path.join(d, "token.crt")
        if not os.path.exists(self.cert):
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key,
                            "-out", self.cert, "-days", "2", "-subj", "/CN=gguf-test-token"],
                           check=True, capture_output=True)
        der = subprocess.run(["openssl", "x509", "-in", self.cert, "-outform", "DER"], check=True,
                             capture_output=True).stdout
        self.x5c = base64.b64encode(der).decode()

    def sign(self, data):
        return subprocess.run(["openssl", "dgst", "-sha256", "-sign", self.key], input=data, check=True,
                              capture_output=True).stdout


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--users", default="")
    p.add_argument("--private", default="")
    p.add_argument("--expires-in", type=int, default=300)
    p.add_argument("--early", type=int, default=0)
    p.add_argument("--refresh-tokens", default="")
    p.add_argument("--rotate", action="store_true")
    a = p.parse_args()
    refresh = dict(t.rsplit(":", 1) for t in a.refresh_tokens.split(",") if t)
    lock = threading.Lock()
    keys = Keys(a.dir)
    users = dict(u.split(":", 1) for u in a.users.split(",") if u)
    private = set(r for r in a.private.split(",") if r)
    log_path = os.path.join(a.dir, "token.log")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            q = urllib.parse.parse_qs(url.query)
            scope = q.get("scope", [""])[0]
            user = None
            auth = self.headers.get("Authorization", "")
            if auth.startswith("Basic "):
                try:
                    u, pw = base64.b64decode(auth[6:]).decode().split(":", 1)
                except Exception:
                    u, pw = None, None
                if u not in users or users[u] != pw:
                    with open(log_path, "a") as f:
                        f.write(json.dumps({"path": url.path, "scope": scope, "credentials": True, "user": u,
                                            "refused": True}) + "\n")
                    return self.answer(401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]})
                user = u
            with open(log_path, "a") as f:
                f.write(json.dumps({"method": "GET", "path": url.path, "scope": scope, "credentials": bool(auth),
                                    "user": user}) + "\n")
            self.answer(200, make_token(user, scope, q.get("service", [""])[0]))

        def do_POST(self):
            url = urllib.parse.urlparse(self.path)
            n = int(self.headers.get("Content-Length", "0") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(n).decode())
            get = lambda k: form.get(k, [""])[0]
            scope = get("scope")
            entry = {"method": "POST", "path": url.path, "scope": scope, "credentials": True,
                     "grant_type": get("grant_type"), "client_id": get("client_id"), "service": get("service")}
            with lock:
                user = refresh.get(get("refresh_token")) if get("grant_type") == "refresh_token" else None
                new_refresh = None
                if user is not None and a.rotate:
                    old = get("refresh_token")
                    del refresh[old]
                    new_refresh = old + "-r1"
                    refresh[new_refresh] = user
            entry["user"] = user
            if user is None:
                entry["refused"] = True
            with open(log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
            if user is None:
                return self.answer(401, {"error": "invalid_grant"})
            body = make_token(user, scope, get("service"))
            out = {"access_token": body["access_token"], "expires_in": body["expires_in"], "scope": scope}
            if new_refresh:
                out["refresh_token"] = new_refresh
            self.answer(200, out)

    def make_token(user, scope, service):
        access = []
        parts = scope.split(":")
        if len(parts) == 3 and parts[0] == "repository":
            name = parts[1]
            if user is not None or name not in private:
                access.append({"type": "repository", "name": name, "actions": ["pull", "push"]})
        now = int(time.time())
        claims = {"iss": "gguf-test-issuer", "sub": user or "", "aud": service,
                  # A push token (the tests' own uploads) is not moved early: an upload on a
                  # loaded machine may take longer than the short life a test gives pull tokens.
                  "exp": now + a.expires_in - (0 if scope.endswith(",push") else a.early),
                  "nbf": now - 10, "iat": now,
                  "jti": b64url(os.urandom(12)), "access": access}
        header = {"typ": "JWT", "alg": "RS256", "x5c": [keys.x5c]}
        signing = (b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())).encode()
        token = signing.decode() + "." + b64url(keys.sign(signing))
        return {"token": token, "access_token": token, "expires_in": a.expires_in,
                "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}

    loopback.serve(Handler, a.port_file)


if __name__ == "__main__":
    sys.exit(main())
