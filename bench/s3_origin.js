// Bench-only S3 origin (bench/large_remote.py, source "s3"): nginx serves the objects of one
// bucket from a directory (Range, ETag, sendfile), and this handler, run by auth_request before
// each request, recomputes the request's Signature Version 4 and refuses a mismatch with 403, as
// S3 does. The canonical request is built here from the request's own SignedHeaders (AWS's
// "Authenticating Requests: Using the Authorization Header (AWS Signature Version 4)", Amazon S3
// API reference); its URI and query, and the signature itself, come from the fleet tier's signer
// (docs/fleet/s3_sigv4.js canonical() and signature(), tested against AWS's example). njs 0.7.
//
// Why not s3rver here: the tests' S3 server with its verifying proxy (tests/remote/s3/
// s3_server.js) is a node process on the client's own 2 vCPUs that spent 5.1 to 9.6 CPU-seconds
// on the same 3.16 GB pass, mostly in V8's garbage collector (bench/README.md "The S3 origin of
// the remote row"): a cold row against it measured the origin's share of the CPUs more than the
// clients. The tests keep s3rver for S3's semantics; the bench keeps it as the "s3rver" source.
//
// Variables read (set in the verifying location): $bench_s3_key, $bench_s3_secret.
'use strict';

import sigv4 from 's3_sigv4.js';

const AUTH = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/;
const MAX_SKEW_MS = 900 * 1000;

/// Milliseconds since the epoch of an x-amz-date ("20261207T061500Z"), NaN when malformed.
function amzTime(s) {
    const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s || '');
    return m ? Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]) : NaN;
}

/// Why the request is refused ("" when its signature is S3's for $bench_s3_secret).
function refusal(r) {
    const m = AUTH.exec(r.headersIn['Authorization'] || '');
    if (!m) return 'no or malformed SigV4 Authorization header';
    const accessKey = m[1], day = m[2], region = m[3], signed = m[4].split(';'), signature = m[5];
    if (accessKey !== r.variables.bench_s3_key) return 'unknown access key';
    const amzDate = r.headersIn['X-Amz-Date'] || '';
    const t = amzTime(amzDate);
    if (isNaN(t) || amzDate.slice(0, 8) !== day) return 'x-amz-date missing or outside the credential scope';
    if (Math.abs(Date.now() - t) > MAX_SKEW_MS) return 'request time too skewed';
    const required = ['host', 'x-amz-content-sha256', 'x-amz-date'];
    for (let k = 0; k < required.length; k++) {
        if (signed.indexOf(required[k]) < 0) return required[k] + ' is not signed';
    }
    let lines = '';
    for (let k = 0; k < signed.length; k++) {
        const v = r.headersIn[signed[k]];
        if (v === undefined) return 'signed header ' + signed[k] + ' is missing';
        lines += signed[k] + ':' + String(v).trim().replace(/\s+/g, ' ') + '\n';
    }
    const c = sigv4.canonical(r.variables.request_uri);
    if (!c) return 'malformed URI';
    const canonicalRequest = [r.variables.request_method, c.path, c.query, lines, signed.join(';'),
        r.headersIn['X-Amz-Content-SHA256']].join('\n');
    if (sigv4.signature(canonicalRequest, amzDate, region, r.variables.bench_s3_secret) !== signature)
        return 'SignatureDoesNotMatch';
    return '';
}

/// auth_request handler: 204 for a request signed with the bucket's credentials, else 403 (the
/// reason in the error log).
function verify(r) {
    const why = refusal(r);
    if (why) {
        r.warn('bench s3 origin: refused ' + r.variables.request_uri + ': ' + why);
        r.return(403);
        return;
    }
    r.return(204);
}

export default { verify };
