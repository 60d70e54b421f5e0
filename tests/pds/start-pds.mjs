#!/usr/bin/env node
// Feather test bed: Bluesky's reference PDS + an in-memory PLC directory on
// loopback, started through @atproto/dev-env's TestNetworkNoAppView (pinned in
// package.json; this version runs on Node 20). No Postgres, Redis or appview.
//
// Usage:
//   node start-pds.mjs [--plc-port N] [--pds-port N] [--accounts alice,bob]
//                      [--rate-limits] [--exit-on-stdin-close]
//                      [--oauth-trusted-clients id1,id2]
//
// A port of 0 (the default) lets dev-env pick a free port (get-port asks the
// OS). Once everything is up, exactly ONE JSON line goes to stdout:
//   {"plc": "http://localhost:P", "pds": "http://localhost:Q",
//    "issuer": ..., "serviceDid": ..., "firehose": ..., "rateLimits": bool,
//    "accounts": {"alice": {"did", "handle", "password", "email"}, ...}}
// Everything else (diagnostics, errors) goes to stderr. The process then stays
// up until SIGINT/SIGTERM, or until stdin closes with --exit-on-stdin-close.
//
// Why "localhost" and not 127.0.0.1 in the URLs: the PDS derives its public
// URL from its hostname, and only hostname "localhost" gives an http:// URL
// (any other hostname becomes https://<hostname>). So the DID documents'
// #atproto_pds serviceEndpoint, the OAuth issuer and the protected-resource
// URL are all exactly http://localhost:<pds port>. Both servers listen on all
// interfaces, so 127.0.0.1 reaches them too, but URLs that get compared
// (issuer, DPoP "htu", DID-doc endpoint) must use the localhost form.
//
// OAuth (for the OAuth tests). Nothing to switch on: with devMode the PDS is
// its own authorization server and serves it on the same port. Checked
// against this pinned version (pds 0.4.217, oauth-provider 0.15.15):
//   - issuer = resource = http://localhost:<pds port> (https is NOT required:
//     devMode allows an http resource, and oauth-types accepts http issuers on
//     loopback hosts). /.well-known/oauth-protected-resource and
//     /.well-known/oauth-authorization-server both answer 200.
//   - DPoP "htu" is checked against URLs built from the issuer / public URL,
//     never from the Host header: a proof must say http://localhost:<port>/...
//     even when the request goes to 127.0.0.1 (otherwise 401
//     invalid_dpop_proof 'DPoP "htu" mismatch').
//   - Loopback public client: client_id "http://localhost?redirect_uri=
//     http%3A%2F%2F127.0.0.1%3A<port>%2F...&scope=atproto+..." (no port, path
//     "/"); redirect URIs must use 127.0.0.1 or [::1] - "localhost" answers
//     400 invalid_request (RFC 8252). PAR answers 201 {request_uri,
//     expires_in: 299}. Untrusted public clients are always forced through
//     consent (prompt=consent); --oauth-trusted-clients a,b marks client ids
//     trusted (PDS_OAUTH_TRUSTED_CLIENTS) if a test wants otherwise.
//   - GET /oauth/authorize needs Sec-Fetch-Mode: navigate, Sec-Fetch-Dest:
//     document and Sec-Fetch-Site: none (without the last one: 400 HTML). It
//     sets dev-id/ses-id cookies (HttpOnly, not Secure under an http issuer)
//     and a csrf-token cookie that IS marked Secure: a Python cookie jar will
//     not send it over http, so set the Cookie header by hand.
//   - disableSsrfProtection is on (dev-env default), so the PDS may fetch
//     client metadata / JWKS from loopback URLs of a confidential client.
//   - No hCaptcha, no email verification: the printed passwords sign in.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'

const log = (...args) => console.error('[start-pds]', ...args)
// Anything a dependency prints with console.log must not reach stdout.
console.log = (...args) => console.error(...args)
console.info = (...args) => console.error(...args)

function parseArgs(argv) {
  const opts = {
    plcPort: 0,
    pdsPort: 0,
    accounts: ['alice', 'bob', 'carol'],
    rateLimits: false,
    exitOnStdinClose: false,
    trustedClients: [],
  }
  const need = (i, flag) => {
    if (i >= argv.length) throw new Error(`missing value for ${flag}`)
    return argv[i]
  }
  const port = (v, flag) => {
    const n = Number(v)
    if (!Number.isInteger(n) || n < 0 || n > 65535) {
      throw new Error(`bad port for ${flag}: ${v}`)
    }
    return n
  }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    switch (a) {
      case '--plc-port':
        opts.plcPort = port(need(++i, a), a)
        break
      case '--pds-port':
        opts.pdsPort = port(need(++i, a), a)
        break
      case '--accounts':
        opts.accounts = need(++i, a)
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean)
        break
      case '--rate-limits':
        opts.rateLimits = true
        break
      case '--exit-on-stdin-close':
        opts.exitOnStdinClose = true
        break
      case '--oauth-trusted-clients':
        opts.trustedClients = need(++i, a)
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean)
        break
      default:
        throw new Error(`unknown argument: ${a}`)
    }
  }
  for (const name of opts.accounts) {
    // becomes the first label of "<name>.test" (the PDS wants 3-18 chars)
    if (!/^[a-z][a-z0-9-]{2,17}$/.test(name)) {
      throw new Error(`bad account name: ${name}`)
    }
  }
  return opts
}

let opts
try {
  opts = parseArgs(process.argv.slice(2))
} catch (err) {
  log(String(err.message ?? err))
  process.exit(2)
}

// All PDS data (SQLite files, blobs, the extra random dirs TestPds makes in
// os.tmpdir()) lives under one temp dir that we delete on the way out.
const tmpRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'feather-pds-'))
process.env.TMPDIR = tmpRoot
// PDS logging is off unless LOG_ENABLED is set; if it is, keep it off stdout.
if (!process.env.LOG_DESTINATION) process.env.LOG_DESTINATION = '/dev/stderr'

let network = null
let stopping = false

function removeTmp() {
  try {
    fs.rmSync(tmpRoot, { recursive: true, force: true })
  } catch (err) {
    log('could not remove', tmpRoot, String(err))
  }
}

async function shutdown(reason, code = 0) {
  if (stopping) return
  stopping = true
  log(`stopping (${reason})`)
  // http-terminator waits for keep-alive sockets; don't let that hold us up.
  const grace = new Promise((resolve) => setTimeout(resolve, 2000).unref())
  if (network) {
    await Promise.race([network.close().catch((err) => log('close:', String(err))), grace])
  }
  removeTmp()
  process.exit(code)
}

process.on('SIGINT', () => shutdown('SIGINT'))
process.on('SIGTERM', () => shutdown('SIGTERM'))
process.on('uncaughtException', (err) => {
  log('uncaught exception:', err?.stack ?? String(err))
  shutdown('uncaughtException', 1)
})
process.on('unhandledRejection', (err) => {
  log('unhandled rejection:', err?.stack ?? String(err))
})
if (opts.exitOnStdinClose) {
  process.stdin.on('end', () => shutdown('stdin closed'))
  process.stdin.on('close', () => shutdown('stdin closed'))
  process.stdin.on('error', () => shutdown('stdin error'))
  process.stdin.resume() // discard whatever the parent writes
}

async function xrpcPost(base, nsid, body) {
  const res = await fetch(`${base}/xrpc/${nsid}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  const text = await res.text()
  if (!res.ok) throw new Error(`${nsid} -> ${res.status} ${text}`)
  return JSON.parse(text)
}

async function main() {
  const t0 = performance.now()
  const { TestNetworkNoAppView } = await import('@atproto/dev-env')
  const tImport = performance.now()

  // dev-env spreads these objects over its own settings, so a port of 0 must
  // be left out (not passed) for dev-env's get-port to pick a free one.
  network = await TestNetworkNoAppView.create({
    plc: opts.plcPort ? { port: opts.plcPort } : {},
    pds: {
      ...(opts.pdsPort ? { port: opts.pdsPort } : {}),
      hostname: 'localhost',
      rateLimitsEnabled: opts.rateLimits,
      ...(opts.trustedClients.length
        ? { trustedOAuthClients: opts.trustedClients }
        : {}),
    },
  })
  const tUp = performance.now()
  if (stopping) return

  const pdsUrl = network.pds.url
  const plcUrl = network.plc.url
  const cfg = network.pds.ctx.cfg

  const accounts = {}
  for (const name of opts.accounts) {
    const handle = `${name}.test`
    const email = `${name}@feather.test`
    const password = `${name}-password`
    const out = await xrpcPost(pdsUrl, 'com.atproto.server.createAccount', {
      handle,
      email,
      password,
    })
    accounts[name] = { did: out.did, handle: out.handle, password, email }
  }
  const tAccounts = performance.now()
  if (stopping) return

  const line = {
    plc: plcUrl,
    pds: pdsUrl,
    issuer: cfg.oauth.issuer,
    serviceDid: cfg.service.did,
    firehose: `${pdsUrl.replace(/^http/, 'ws')}/xrpc/com.atproto.sync.subscribeRepos`,
    rateLimits: opts.rateLimits,
    accounts,
  }
  process.stdout.write(JSON.stringify(line) + '\n')
  log(
    `ready: pds ${pdsUrl} plc ${plcUrl} rateLimits=${opts.rateLimits}` +
      ` (import ${(tImport - t0).toFixed(0)} ms, start ${(tUp - tImport).toFixed(0)} ms,` +
      ` ${opts.accounts.length} accounts ${(tAccounts - tUp).toFixed(0)} ms)`,
  )
}

main().catch((err) => {
  log('failed to start:', err?.stack ?? String(err))
  if (err?.cause) log('cause:', err.cause?.stack ?? String(err.cause))
  shutdown('startup failure', 1)
})
