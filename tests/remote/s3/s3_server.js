// Test-only S3 server for the remote tests (started by tests/remote/s3_servers.cpp, 127.0.0.1 only):
// s3rver (ListObjectsV2, Range, ETags, S3 errors), which checks only that a V4 access key exists,
// behind a proxy that recomputes every signed request's Signature V4 with AWS's own signer
// (@smithy/signature-v4) and answers 403 SignatureDoesNotMatch on a mismatch, so a wrong secret
// fails here as it does on S3.
//
// Usage: node s3_server.js CONFIG.json, with
//   { "directory": s3rver's data dir, "seed": dir of BUCKET/KEY files uploaded at start (optional),
//     "buckets": [names to create], "credentials": { ACCESS_KEY: { "secret": S, "session_token": T?,
//     "expired_tokens": [T...]? } }, "access_log": path (JSON lines), "ready": path (written with
//     {"s3_port", "proxy_port"} once both listen), "max_skew_seconds": 900,
//     "proxy_port": N (optional: the proxy's port; 0 or absent: any free one),
//     "faults_file": path (optional; read at each request when it changed),
//     "list_max_keys": N (optional: ListObjectsV2 pages of N entries, as if the client asked) }
// A ListObjectsV2 request with encoding-type=url is answered as S3 does (urlEncodedListing).
// Each access-log line also gives "in_flight" (requests the proxy was answering when this one
// arrived, itself included) and "client_port" (the client's TCP port: one per connection).
// The faults file is a JSON array of answers the proxy gives instead of s3rver's, each after the
// request was verified: { "match": substring of the raw request URI, "method": "GET"? (any when
// absent), "status": 503, "code": "SlowDown", "message": "...", "headers": {...}, "times": N
// (how many requests it answers; all when absent), "delay_ms": N (optional: the answer is held N
// ms first; with "status" 0 or absent, s3rver's own answer is then given) }.
// Requests without Authorization pass unverified (public buckets, --no-sign-request).
'use strict';

const fs = require('fs');
const http = require('http');
const path = require('path');
const S3rver = require('s3rver');
const { SignatureV4 } = require('@smithy/signature-v4');
const { Hash } = require('@smithy/hash-node');
const { escapeUri } = require('@smithy/core/protocols');

const FilesystemStore = require('s3rver/lib/stores/filesystem');

// s3rver 3.7.1 skips the directories below a common prefix before it has seen an object in them,
// so a prefix whose keys all lie two or more levels deeper is never listed as a CommonPrefix
// ("sets/" of "sets/a/b/k"). Listed here as S3 does: the keys without the delimiter, grouped.
const listWithoutDelimiter = FilesystemStore.prototype.listObjects;
FilesystemStore.prototype.listObjects = async function listObjects(bucket, options) {
  const { delimiter = '', prefix = '', maxKeys = Infinity } = options;
  if (!delimiter) return listWithoutDelimiter.call(this, bucket, options);
  const all = await listWithoutDelimiter.call(this, bucket, { ...options, delimiter: '', maxKeys: Infinity });
  const objects = [];
  const commonPrefixes = new Set();
  let isTruncated = false;
  for (const object of all.objects) {
    const i = object.key.slice(prefix.length).indexOf(delimiter);
    if (i !== -1) {
      commonPrefixes.add(object.key.slice(0, prefix.length + i + 1));
    } else if (objects.length < maxKeys) {
      objects.push(object);
    } else {
      isTruncated = true;
      break;
    }
  }
  return { objects, commonPrefixes: [...commonPrefixes].sort(), isTruncated };
};

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const sha256 = Hash.bind(null, 'sha256');
const maxSkew = (config.max_skew_seconds ?? 900) * 1000;
const AUTH = /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/;

function errorXml(code, message, resource) {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${message}</Message>` +
    `<Resource>${resource.replace(/&/g, '&amp;').replace(/</g, '&lt;')}</Resource><RequestId>test</RequestId></Error>`;
}

function parseAmzDate(s) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s || '');
  if (!m) return null;
  return new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]));
}

/// The query as S3 reads it: each name and value percent-decoded (RFC 3986, '+' is a plus).
function parseQuery(raw) {
  const query = {};
  for (const pair of raw.split('&')) {
    if (!pair) continue;
    const i = pair.indexOf('=');
    const name = decodeURIComponent(i < 0 ? pair : pair.slice(0, i));
    const value = i < 0 ? '' : decodeURIComponent(pair.slice(i + 1));
    if (name in query) query[name] = [].concat(query[name], value);
    else query[name] = value;
  }
  return query;
}

/// Text of an XML element as s3rver writes it, unescaped (the five entities and &#N; / &#xN;).
function xmlText(s) {
  return s.replace(/&(amp|lt|gt|quot|apos|#x[0-9a-fA-F]+|#[0-9]+);/g, (all, e) => {
    if (e === 'amp') return '&';
    if (e === 'lt') return '<';
    if (e === 'gt') return '>';
    if (e === 'quot') return '"';
    if (e === 'apos') return "'";
    return String.fromCodePoint(e[1] === 'x' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
  });
}

/// A ListObjectsV2 answer as S3 gives it for encoding-type=url (s3rver 3.7.1 ignores the
/// parameter): Key, Prefix, Delimiter and StartAfter URL-encoded (form style: a space as '+',
/// every byte but A-Z a-z 0-9 - _ . ~ * as %XX), and <EncodingType>url</EncodingType>.
function urlEncodedListing(xml) {
  const encode = (t) => encodeURIComponent(xmlText(t)).replace(/[!'()]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase())
    .replace(/%20/g, '+');
  let out = xml.replace(/<(Key|Prefix|Delimiter|StartAfter)>([^<]*)<\/\1>/g, (all, name, text) => `<${name}>${encode(text)}</${name}>`);
  out = out.replace(/(<ListBucketResult[^>]*>)/, '$1<EncodingType>url</EncodingType>');
  return out;
}

/// Checks a request's SigV4 Authorization header. Returns null when it is valid, else
/// [status, code, message].
async function verify(req, rawPath, rawQuery) {
  const m = AUTH.exec(req.headers.authorization);
  if (!m) return [400, 'AuthorizationHeaderMalformed', 'The authorization header is malformed.'];
  const [, accessKey, shortDate, region, service, signedHeaders, signature] = m;
  const cred = (config.credentials || {})[accessKey];
  if (!cred) return [403, 'InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.'];
  const token = req.headers['x-amz-security-token'];
  if ((cred.expired_tokens || []).includes(token)) return [400, 'ExpiredToken', 'The provided token has expired.'];
  if (cred.session_token && token !== cred.session_token)
    return [400, 'InvalidToken', 'The provided token is malformed or otherwise invalid.'];
  const date = parseAmzDate(req.headers['x-amz-date']);
  if (!date || shortDate !== req.headers['x-amz-date'].slice(0, 8))
    return [403, 'AccessDenied', 'x-amz-date is missing or does not match the credential scope.'];
  if (Math.abs(Date.now() - date.getTime()) > maxSkew)
    return [403, 'RequestTimeTooSkewed', 'The difference between the request time and the current time is too large.'];
  const names = signedHeaders.split(';');
  for (const required of ['host', 'x-amz-content-sha256', 'x-amz-date'])
    if (!names.includes(required)) return [403, 'AccessDenied', `${required} is not signed.`];
  if (token && !names.includes('x-amz-security-token'))
    return [403, 'AccessDenied', 'x-amz-security-token is not signed.'];
  const headers = {};
  for (const name of names) {
    if (req.headers[name] === undefined) return [403, 'SignatureDoesNotMatch', `signed header ${name} is missing.`];
    headers[name] = String(req.headers[name]);
  }
  let canonicalPath;
  let query;
  try {
    // S3 decodes the path and query it receives and encodes them again to sign: a client that
    // encoded differently from AWS fails here as it would on S3.
    canonicalPath = rawPath.split('/').map((s) => escapeUri(decodeURIComponent(s))).join('/');
    query = parseQuery(rawQuery);
  } catch (e) {
    return [400, 'InvalidURI', 'Couldn\'t parse the specified URI.'];
  }
  const signer = new SignatureV4({
    credentials: { accessKeyId: accessKey, secretAccessKey: cred.secret, sessionToken: token },
    region, service, sha256, uriEscapePath: false, applyChecksum: false,
  });
  const signed = await signer.sign(
    { method: req.method, protocol: 'http:', hostname: headers.host, path: canonicalPath, query, headers },
    { signingDate: date, signingRegion: region, signingService: service });
  const expected = /Signature=([0-9a-f]{64})/.exec(signed.headers.authorization)[1];
  if (expected !== signature)
    return [403, 'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. Check your key and signing method.'];
  return null;
}

let faults = [];
let faultsStamp = '';
/// The fault that answers this request, if any (its count taken).
function takeFault(req) {
  if (!config.faults_file) return null;
  let stamp = '';
  try {
    const st = fs.statSync(config.faults_file);
    stamp = `${st.mtimeMs}:${st.size}:${st.ino}`;
  } catch (e) {
    faults = [];
    faultsStamp = '';
    return null;
  }
  if (stamp !== faultsStamp) {
    faultsStamp = stamp;
    try {
      faults = JSON.parse(fs.readFileSync(config.faults_file, 'utf8')).map((f) => ({ ...f, left: f.times ?? Infinity }));
    } catch (e) {
      faults = [];
    }
  }
  for (const f of faults) {
    if (f.left <= 0 || !req.url.includes(f.match || '') || (f.method && f.method !== req.method)) continue;
    f.left -= 1;
    return f;
  }
  return null;
}

function log(entry) {
  fs.appendFileSync(config.access_log, JSON.stringify(entry) + '\n');
}

async function seed(s3Port) {
  if (!config.seed) return;
  const signer = new SignatureV4({
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' }, region: 'us-east-1', service: 's3', sha256,
    uriEscapePath: false, applyChecksum: false,
  });
  const walk = (dir) => fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
    d.isDirectory() ? walk(path.join(dir, d.name)) : [path.join(dir, d.name)]);
  for (const bucket of fs.readdirSync(config.seed)) {
    for (const file of walk(path.join(config.seed, bucket))) {
      const key = path.relative(path.join(config.seed, bucket), file);
      const urlPath = '/' + bucket + '/' + key.split('/').map(escapeUri).join('/');
      const size = fs.statSync(file).size;
      const headers = { host: `127.0.0.1:${s3Port}`, 'content-length': String(size), 'x-amz-content-sha256': 'UNSIGNED-PAYLOAD' };
      const signed = await signer.sign({ method: 'PUT', protocol: 'http:', hostname: headers.host, path: urlPath, query: {}, headers });
      await new Promise((resolve, reject) => {
        const r = http.request({ host: '127.0.0.1', port: s3Port, method: 'PUT', path: urlPath, headers: signed.headers }, (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`PUT ${key}: ${res.statusCode}`))));
        });
        r.on('error', reject);
        fs.createReadStream(file).pipe(r);
      });
    }
  }
}

async function main() {
  const s3 = new S3rver({
    address: '127.0.0.1', port: 0, silent: true, directory: config.directory, vhostBuckets: false,
    configureBuckets: (config.buckets || []).map((name) => ({ name })),
  });
  const { port: s3Port } = await s3.run();
  await seed(s3Port);
  let seq = 0;
  let inFlight = 0;
  const proxy = http.createServer(async (req, res) => {
    const n = ++seq;
    inFlight += 1;
    res.on('close', () => { inFlight -= 1; });
    const q = req.url.indexOf('?');
    const rawPath = q < 0 ? req.url : req.url.slice(0, q);
    const rawQuery = q < 0 ? '' : req.url.slice(q + 1);
    const entry = {
      port: proxy.address().port, method: req.method, uri: req.url, request: `${req.method} ${req.url} HTTP/1.1`,
      range: req.headers.range || '', authorization: req.headers.authorization || '', seq: n,
      verdict: req.headers.authorization ? 'verified' : 'anonymous', in_flight: inFlight,
      client_port: req.socket.remotePort,
    };
    let refusal = null;
    if (req.headers.authorization) {
      try {
        refusal = await verify(req, rawPath, rawQuery);
      } catch (e) {
        refusal = [500, 'InternalError', String(e.message).replace(/[<&]/g, ' ')];
      }
    }
    let fault = refusal ? null : takeFault(req);
    if (fault && fault.delay_ms) await new Promise((resolve) => setTimeout(resolve, fault.delay_ms));
    if (fault && !fault.status) fault = null;  // a delay only
    if (fault) {
      const body = req.method === 'HEAD' || !fault.code ? '' : errorXml(fault.code, fault.message || fault.code, rawPath);
      res.writeHead(fault.status, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body),
        ...(fault.headers || {}) });
      res.end(body);
      log({ ...entry, status: fault.status, fault: fault.code || String(fault.status), bytes_sent: body.length,
        body_bytes_sent: body.length });
      req.resume();
      return;
    }
    if (refusal) {
      const body = req.method === 'HEAD' ? '' : errorXml(refusal[1], refusal[2], rawPath);
      res.writeHead(refusal[0], { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) });
      res.end(body);
      log({ ...entry, status: refusal[0], verdict: refusal[1], bytes_sent: body.length, body_bytes_sent: body.length });
      req.resume();
      return;
    }
    const headers = { ...req.headers };
    // s3rver knows only its own key; it checks no V4 signature, so the key name is all it reads.
    if (headers.authorization) headers.authorization = headers.authorization.replace(/Credential=[^/]+\//, 'Credential=S3RVER/');
    // Small pages on request (after the signature was checked on the query as sent).
    let upPath = req.url;
    if (config.list_max_keys && /(^|&)list-type=2(&|$)/.test(rawQuery)) upPath += `&max-keys=${config.list_max_keys}`;
    let query = {};
    try { query = parseQuery(rawQuery); } catch (e) { query = {}; }
    const encodeKeys = query['list-type'] === '2' && query['encoding-type'] === 'url';
    const up = http.request({ host: '127.0.0.1', port: s3Port, method: req.method, path: upPath, headers }, (ur) => {
      if (encodeKeys && ur.statusCode === 200) {
        const chunks = [];
        ur.on('data', (chunk) => chunks.push(chunk));
        ur.on('end', () => {
          const body = Buffer.from(urlEncodedListing(Buffer.concat(chunks).toString('utf8')), 'utf8');
          const h = { ...ur.headers, 'content-length': String(body.length) };
          delete h['transfer-encoding'];
          res.writeHead(200, h);
          res.end(body);
          log({ ...entry, status: 200, bytes_sent: body.length, body_bytes_sent: body.length });
        });
        return;
      }
      let body = 0;
      res.writeHead(ur.statusCode, ur.headers);
      ur.on('data', (chunk) => { body += chunk.length; });
      ur.pipe(res);
      res.on('finish', () => log({ ...entry, status: ur.statusCode, bytes_sent: body, body_bytes_sent: body }));
      res.on('close', () => { if (!res.writableFinished) log({ ...entry, status: 499, bytes_sent: body, body_bytes_sent: body }); });
    });
    up.on('error', (e) => {
      res.writeHead(502);
      res.end();
      log({ ...entry, status: 502, bytes_sent: 0, body_bytes_sent: 0, error: e.message });
    });
    req.pipe(up);
  });
  proxy.keepAliveTimeout = 30000;
  await new Promise((resolve) => proxy.listen(config.proxy_port || 0, '127.0.0.1', resolve));
  const ready = JSON.stringify({ s3_port: s3Port, proxy_port: proxy.address().port });
  fs.writeFileSync(config.ready + '.tmp', ready);
  fs.renameSync(config.ready + '.tmp', config.ready);
  const stop = () => { proxy.close(); s3.close(); process.exit(0); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
