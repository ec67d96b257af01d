// AWS Signature Version 4 for the requests an nginx fleet tier (docs/fleet/s3.conf) sends to an
// S3 endpoint with its own credentials, written from AWS's specification ("Signature Version 4
// signing process"; "Authenticating Requests: Using the Authorization Header (AWS Signature
// Version 4)" in the Amazon S3 API reference). njs 0.7 (Debian 12's libnginx-mod-http-js).
//
// What nginx sends upstream (s3.conf: proxy_pass_request_headers off) and what is signed:
//   GET <uri()>                       the path and query in S3's canonical form, so the bytes sent
//                                     are the bytes signed (S3 decodes them and encodes them again)
//   Host: $gguf_fleet_s3_host          signed
//   X-Amz-Date: date()                 signed
//   X-Amz-Content-SHA256: <empty hash> signed (a GET has no body)
//   X-Amz-Security-Token: token()      signed when AWS_SESSION_TOKEN is set, else not sent
//   Authorization: authorization()
//   Range: $slice_range                not signed (SigV4 signs host and the x-amz-* headers; any
//                                     other header may stay out of SignedHeaders)
// Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (optional) from
// nginx's own environment, passed to the workers with `env NAME;` in nginx.conf (njs reads
// process.env as it was when the configuration was loaded: `env NAME=VALUE;` is not seen, and a
// rotated key needs a reload). The region is $gguf_fleet_s3_region.
'use strict';

const crypto = require('crypto');

const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

/// RFC 3986 encoding as SigV4 wants it: every byte but A-Z a-z 0-9 - _ . ~ as %XX (upper hex).
function awsEncode(s) {
    return encodeURIComponent(s).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
}

/// The canonical URI and query of a raw request target ("/b/a%20b.gguf?list-type=2&prefix=x"):
/// each path segment decoded and encoded once; query pairs decoded, encoded, sorted by name then
/// value. Returns null when a %-escape is malformed.
function canonical(target) {
    const q = target.indexOf('?');
    const rawPath = q < 0 ? target : target.slice(0, q);
    const rawQuery = q < 0 ? '' : target.slice(q + 1);
    try {
        const path = rawPath.split('/').map((seg) => awsEncode(decodeURIComponent(seg))).join('/');
        const pairs = rawQuery.split('&').filter((p) => p.length > 0).map((p) => {
            const i = p.indexOf('=');
            const name = decodeURIComponent(i < 0 ? p : p.slice(0, i));
            const value = i < 0 ? '' : decodeURIComponent(p.slice(i + 1));
            return [awsEncode(name), awsEncode(value)];
        });
        pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
        return { path: path, query: pairs.map((p) => p[0] + '=' + p[1]).join('&') };
    } catch (e) {
        return null;
    }
}

function hmac(key, text) {
    return crypto.createHmac('sha256', key).update(text).digest();
}

/// The Authorization header value for one request. `p`: method, path, query (canonical),
/// host, amzDate ("20130524T000000Z"), region, accessKey, secret, token ("" = none),
/// payloadHash. Pure: the published AWS examples test it.
function sign(p) {
    const names = ['host', 'x-amz-content-sha256', 'x-amz-date'];
    const values = { 'host': p.host, 'x-amz-content-sha256': p.payloadHash, 'x-amz-date': p.amzDate };
    if (p.token) {
        names.push('x-amz-security-token');
        values['x-amz-security-token'] = p.token;
    }
    const signedHeaders = names.join(';');
    const canonicalRequest = [p.method, p.path, p.query, names.map((n) => n + ':' + values[n] + '\n').join(''),
        signedHeaders, p.payloadHash].join('\n');
    return 'AWS4-HMAC-SHA256 Credential=' + p.accessKey + '/' + scope(p.amzDate, p.region) + ', SignedHeaders=' +
        signedHeaders + ', Signature=' + signature(canonicalRequest, p.amzDate, p.region, p.secret);
}

/// The credential scope of a request at `amzDate` in `region`: "20130524/us-east-1/s3/aws4_request".
function scope(amzDate, region) {
    return amzDate.slice(0, 8) + '/' + region + '/s3/aws4_request';
}

/// The hex Signature V4 of a canonical request (its lines as AWS defines them) made at `amzDate`
/// for `region` with `secret`: the string to sign, the derived signing key, their HMAC. Pure;
/// sign() uses it, and so does the bench's verifying S3 origin (bench/s3_origin.js).
function signature(canonicalRequest, amzDate, region, secret) {
    const stringToSign = ['AWS4-HMAC-SHA256', amzDate, scope(amzDate, region),
        crypto.createHash('sha256').update(canonicalRequest).digest('hex')].join('\n');
    const key = hmac(hmac(hmac(hmac('AWS4' + secret, amzDate.slice(0, 8)), region), 's3'), 'aws4_request');
    return crypto.createHmac('sha256', key).update(stringToSign).digest('hex');
}

/// The ListObjectsV2 request parameters ("ListObjectsV2" in the Amazon S3 API reference): the
/// only query a listing may have; list-type must be 2.
const LIST_PARAMETERS = ['list-type', 'prefix', 'delimiter', 'continuation-token', 'start-after', 'max-keys',
    'encoding-type', 'fetch-owner'];

/// What the tier does with a raw request target `raw` ($request_uri) for the one bucket `bucket`:
/// { status: 0, path, query, listing } to sign and send exactly `path` + `query` (checked here,
/// from the raw target: nginx's normalized $uri is never used), or { status: 400 | 403 } to
/// refuse it. Refused with 400: a target that is not a path, a malformed %-escape, a "." or ".."
/// segment (also %2E-encoded), an encoded '/' (%2F) or NUL in a segment. Refused with 403: a first
/// segment other than the bucket (compared literally, after decoding), an object read with a query
/// other than "" or x-id=GetObject (?acl, ?policy, ?versionId=, ?response-content-type=, ...), a
/// listing (a query on the bucket itself) that is not ListObjectsV2 with its own parameters only,
/// each at most once, and a request for the bucket without a listing query. An object read is sent
/// without a query (x-id=GetObject is a client-side routing hint), so both forms share a cache key.
function check(raw, bucket) {
    if (typeof raw !== 'string' || raw[0] !== '/') return { status: 400 };
    const q = raw.indexOf('?');
    const rawPath = q < 0 ? raw : raw.slice(0, q);
    const rawQuery = q < 0 ? '' : raw.slice(q + 1);
    const segments = rawPath.split('/').slice(1);
    const decoded = [];
    for (let k = 0; k < segments.length; k++) {
        let d;
        try {
            d = decodeURIComponent(segments[k]);
        } catch (e) {
            return { status: 400 };
        }
        if (d === '.' || d === '..' || d.indexOf('/') >= 0 || d.indexOf('\0') >= 0) return { status: 400 };
        decoded.push(d);
    }
    if (decoded[0] !== bucket) return { status: 403 };
    const pairs = [];
    const rawPairs = rawQuery.split('&');
    for (let k = 0; k < rawPairs.length; k++) {
        const p = rawPairs[k];
        if (p.length === 0) continue;
        const i = p.indexOf('=');
        try {
            pairs.push([decodeURIComponent(i < 0 ? p : p.slice(0, i)), i < 0 ? '' : decodeURIComponent(p.slice(i + 1))]);
        } catch (e) {
            return { status: 400 };
        }
    }
    const path = '/' + decoded.map(awsEncode).join('/');
    const bucketOnly = decoded.length === 1 || (decoded.length === 2 && decoded[1] === '');
    if (pairs.length === 0 || (pairs.length === 1 && pairs[0][0] === 'x-id' && pairs[0][1] === 'GetObject')) {
        if (bucketOnly) return { status: 403 };  // ListObjects (V1) or a bucket sub-resource
        return { status: 0, path: path, query: '', listing: false };
    }
    if (!bucketOnly) return { status: 403 };
    const seen = {};
    for (let k = 0; k < pairs.length; k++) {
        const name = pairs[k][0];
        if (LIST_PARAMETERS.indexOf(name) < 0 || Object.prototype.hasOwnProperty.call(seen, name)) return { status: 403 };
        seen[name] = pairs[k][1];
    }
    if (seen['list-type'] !== '2') return { status: 403 };
    pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return { status: 0, path: path, query: pairs.map((p) => awsEncode(p[0]) + '=' + awsEncode(p[1])).join('&'),
        listing: true };
}

function checked(r) {
    return check(r.variables.request_uri, r.variables.gguf_fleet_s3_bucket);
}

/// $gguf_fleet_s3_refusal: "" for a request the tier serves, else the status to answer ("400",
/// "403"; check()).
function refusal(r) {
    const c = checked(r);
    return c.status ? String(c.status) : '';
}

/// $gguf_fleet_s3_listing: "1" for a ListObjectsV2 request (passed through, never cached), ""
/// for an object read (cached in slices) or a refused request.
function listing(r) {
    return checked(r).listing ? '1' : '';
}

/// $gguf_fleet_s3_uri: the path and query sent upstream, signed, and the cache key: exactly what
/// check() accepted ("" for a refused request, which s3.conf answers before it is used).
function uri(r) {
    const c = checked(r);
    if (c.status) return '';
    return c.query ? c.path + '?' + c.query : c.path;
}

/// $gguf_fleet_s3_date: the request time, taken once per request (the date header and the
/// signature use the same second).
function date(r) {
    if (!r.variables.gguf_fleet_s3_stamp) {
        r.variables.gguf_fleet_s3_stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    }
    return r.variables.gguf_fleet_s3_stamp;
}

/// $gguf_fleet_s3_token: AWS_SESSION_TOKEN, "" without temporary credentials.
function token(r) {
    return process.env.AWS_SESSION_TOKEN || '';
}

/// $gguf_fleet_s3_authorization: the signature of the upstream GET (proxy_method GET).
function authorization(r) {
    const c = checked(r);
    const accessKey = process.env.AWS_ACCESS_KEY_ID || '';
    const secret = process.env.AWS_SECRET_ACCESS_KEY || '';
    if (c.status || !accessKey || !secret) {
        if (!accessKey || !secret) r.error('gguf fleet s3: AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not set for nginx (env directive)');
        return '';
    }
    return sign({
        method: 'GET', path: c.path, query: c.query, host: r.variables.gguf_fleet_s3_host, amzDate: date(r),
        region: r.variables.gguf_fleet_s3_region, accessKey: accessKey, secret: secret, token: token(r),
        payloadHash: EMPTY_SHA256,
    });
}

export default { uri, refusal, listing, date, token, authorization, sign, signature, canonical, check, EMPTY_SHA256 };
