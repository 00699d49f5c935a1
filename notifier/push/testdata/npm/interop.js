'use strict';
// The npm side of notifier/push's interop test (webpush_npm_test.go): one
// JSON request on stdin, one JSON answer on stdout.
//
//   {"op": "decrypt", "body", "private_key", "auth"}
//       opens an aes128gcm body with http_ece, as web-push's receiver would
//       ({"plaintext"}).
//   {"op": "verify_vapid", "authorization", "public_key"}
//       checks a "vapid t=…, k=…" header's ES256 signature with jws, the
//       JWT library web-push signs with ({"valid", "claims", "k"}).
//   {"op": "request", "subscription", "payload", "vapid", "options"}
//       builds the push request with webpush.generateRequestDetails
//       ({"method", "endpoint", "headers", "body"}).
//
// Every binary value is base64url.

const crypto = require('crypto');
const ece = require('http_ece');
const jws = require('jws');
const webpush = require('web-push');

function decrypt(req) {
  const receiver = crypto.createECDH('prime256v1');
  receiver.setPrivateKey(Buffer.from(req.private_key, 'base64url'));
  const plaintext = ece.decrypt(Buffer.from(req.body, 'base64url'), {
    version: 'aes128gcm',
    privateKey: receiver,
    authSecret: req.auth,
  });
  return { plaintext: plaintext.toString('base64url') };
}

function verifyVapid(req) {
  const m = /^vapid t=([^,\s]+),\s*k=([A-Za-z0-9_-]+)$/.exec(req.authorization);
  if (!m) {
    throw new Error('not a "vapid t=…, k=…" header: ' + req.authorization);
  }
  const raw = Buffer.from(m[2], 'base64url');
  if (raw.length !== 65 || raw[0] !== 4) {
    throw new Error('k is not an uncompressed P-256 point');
  }
  const key = crypto.createPublicKey({
    key: { kty: 'EC', crv: 'P-256', x: raw.subarray(1, 33).toString('base64url'), y: raw.subarray(33).toString('base64url') },
    format: 'jwk',
  });
  const pem = key.export({ type: 'spki', format: 'pem' });
  const parts = m[1].split('.');
  return {
    valid: jws.verify(m[1], 'ES256', pem),
    header: JSON.parse(Buffer.from(parts[0], 'base64url')),
    claims: JSON.parse(Buffer.from(parts[1], 'base64url')),
    k: m[2],
  };
}

function request(req) {
  const details = webpush.generateRequestDetails(req.subscription, Buffer.from(req.payload, 'base64url'),
    Object.assign({ vapidDetails: req.vapid }, req.options));
  return {
    method: details.method,
    endpoint: details.endpoint,
    headers: details.headers,
    body: Buffer.from(details.body).toString('base64url'),
  };
}

const ops = { decrypt: decrypt, verify_vapid: verifyVapid, request: request };

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const req = JSON.parse(input);
  const op = ops[req.op];
  if (!op) {
    throw new Error('unknown op ' + req.op);
  }
  process.stdout.write(JSON.stringify(op(req)));
});
