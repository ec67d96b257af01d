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
    const day = p.amzDate.slice(0, 8);
    const scope = day + '/' + p.region + '/s3/aws4_request';
    const stringToSign = ['AWS4-HMAC-SHA256', p.amzDate, scope,
        crypto.createHash('sha256').update(canonicalRequest).digest('hex')].join('\n');
    const key = hmac(hmac(hmac(hmac('AWS4' + p.secret, day), p.region), 's3'), 'aws4_request');
    const signature = crypto.createHmac('sha256', key).update(stringToSign).digest('hex');
    return 'AWS4-HMAC-SHA256 Credential=' + p.accessKey + '/' + scope + ', SignedHeaders=' + signedHeaders +
        ', Signature=' + signature;
}

/// $gguf_fleet_s3_uri: the path and query sent upstream; "" when the target cannot be decoded
/// (s3.conf answers 400 then).
function uri(r) {
    const c = canonical(r.variables.request_uri);
    if (!c) return '';
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
    const c = canonical(r.variables.request_uri);
    const accessKey = process.env.AWS_ACCESS_KEY_ID || '';
    const secret = process.env.AWS_SECRET_ACCESS_KEY || '';
    if (!c || !accessKey || !secret) {
        if (!accessKey || !secret) r.error('gguf fleet s3: AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY is not set for nginx (env directive)');
        return '';
    }
    return sign({
        method: 'GET', path: c.path, query: c.query, host: r.variables.gguf_fleet_s3_host, amzDate: date(r),
        region: r.variables.gguf_fleet_s3_region, accessKey: accessKey, secret: secret, token: token(r),
        payloadHash: EMPTY_SHA256,
    });
}

export default { uri, date, token, authorization, sign, canonical, EMPTY_SHA256 };
