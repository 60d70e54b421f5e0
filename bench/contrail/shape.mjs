// Feather's own rebuild of Contrail's feed schema and statements on node:sqlite, so the benches can
// put a Contrail-shaped figure beside Feather's in the same run. Contrail itself cannot be installed
// here; this is written from the published shape of its tables and statements, not from its code.
//
// Contrail runs on a WAL file; the connection uses journal_mode=WAL and synchronous=NORMAL, the
// pragmas Feather uses too, so the comparison is of schema and statements, not of durability.
// Timings are taken inside this process, so node's start-up and the pipe never count.
//
//   node shape.mjs schema <db> <short>...                create records_<short> tables + feed_items
//   node shape.mjs fanout <db> <author> <uri> <cid> <time_us> [follow-short]
//        one post create by <author>, as Contrail's live ingest runs it: one transaction of replay
//        check, record upsert, fan-out. -> {"seconds", "inserted", "replay"}
//   node shape.mjs getfeed <db> <nsid> <actor> [limit] [cursor]  -> the getFeed response body
//   node shape.mjs getfeed-rounds <db> <nsid> [limit]
//        reads one JSON array of actors per stdin line; for each line times every actor's first
//        page, then the whole request for it (a fetch-style handler, as Hono's app.request runs
//        one: the Request built, its URL routed and parsed, the page, the JSON Response read back),
//        and answers {"seconds", "pages", "request_seconds", "request_pages"} on one line.
//   node shape.mjs serve <db> <nsid> <port> [namespace]
//        the same handler behind node:http on 127.0.0.1:<port> (GET /xrpc/<namespace>.getFeed?actor=
//        &limit=&cursor=); prints {"listening": port} once it accepts connections.
import { DatabaseSync } from 'node:sqlite';
import { createInterface } from 'node:readline';

const shortOf = (nsid) => nsid.split('.').pop();

function open(path) {
  const db = new DatabaseSync(path);
  db.exec('PRAGMA journal_mode=WAL');
  db.exec('PRAGMA synchronous=NORMAL');
  return db;
}

export function schemaSql(short, { follow = false } = {}) {
  const t = `records_${short}`;
  const sql = [
    `CREATE TABLE IF NOT EXISTS ${t} (uri TEXT PRIMARY KEY, did TEXT NOT NULL, rkey TEXT NOT NULL, cid TEXT,`
      + ` record TEXT, time_us BIGINT NOT NULL, indexed_at BIGINT NOT NULL)`,
    `CREATE INDEX IF NOT EXISTS idx_${short}_did ON ${t}(did)`,
    `CREATE INDEX IF NOT EXISTS idx_${short}_time ON ${t}(time_us DESC)`,
  ];
  if (follow) {
    sql.push(`CREATE INDEX IF NOT EXISTS idx_${short}_subject ON ${t}(json_extract(record,'$.subject'))`);
  }
  return sql;
}

const FEED_ITEMS = [
  'CREATE TABLE IF NOT EXISTS feed_items (actor TEXT NOT NULL, uri TEXT NOT NULL, collection TEXT NOT NULL,'
    + ' time_us BIGINT NOT NULL, PRIMARY KEY (actor, uri))',
  'CREATE INDEX IF NOT EXISTS idx_feed_actor_coll_time ON feed_items(actor, collection, time_us DESC)',
  'CREATE INDEX IF NOT EXISTS idx_feed_actor_time ON feed_items(actor, time_us DESC)',
];

function schema(path, shorts) {
  const db = open(path);
  for (const short of shorts) for (const s of schemaSql(short, { follow: short === 'follow' })) db.exec(s);
  for (const s of FEED_ITEMS) db.exec(s);
  db.close();
  return { ok: true };
}

function fanout(path, author, uri, cid, timeUs, followShort = 'follow') {
  const [, , did, nsid, rkey] = uri.split('/');
  if (did !== author) throw new Error(`${uri} is not by ${author}`);
  const table = `records_${shortOf(nsid)}`;
  const record = JSON.stringify({ $type: nsid, text: 'hello', createdAt: '2025-01-01T00:00:00.000Z' });
  const db = open(path);
  const started = performance.now();
  // Statements are prepared inside the timed span: Contrail's batch prepares them per call.
  const stored = db.prepare(`SELECT cid FROM ${table} WHERE uri = ?`);
  const upsert = db.prepare(
    `INSERT INTO ${table} (uri, did, rkey, cid, record, time_us, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?)`
      + ' ON CONFLICT(uri) DO UPDATE SET cid = excluded.cid, record = excluded.record,'
      + ' time_us = excluded.time_us, indexed_at = excluded.indexed_at');
  const feed = db.prepare(
    'INSERT OR IGNORE INTO feed_items (actor, uri, collection, time_us)'
      + ` SELECT r.did, ?, ?, ? FROM records_${followShort} r WHERE json_extract(r.record,'$.subject') = ?`);
  let inserted = 0;
  let replay = false;
  db.exec('BEGIN');
  try {
    replay = stored.get(uri)?.cid === cid;
    upsert.run(uri, did, rkey, cid, record, timeUs, Date.now() * 1000);
    if (!replay) inserted = Number(feed.run(uri, nsid, timeUs, author).changes);
    db.exec('COMMIT');
  } catch (err) {
    db.exec('ROLLBACK');
    throw err;
  }
  const seconds = (performance.now() - started) / 1000;
  db.close();
  return { seconds, inserted, replay };
}

const encodeCursor = (t, u) => Buffer.from(JSON.stringify({ t, u, k: 'time' }), 'utf8').toString('base64url');

function decodeCursor(cursor) {
  const { t, u } = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  return { t, u };
}

// The listRecords pipeline with feed_items as an extra source. Sorted on the record's time, not
// feed_items': that is Contrail's order, and the reason its cursor carries the record's time.
function pageQueries(db, nsid) {
  const base = 'SELECT r.uri, r.did, r.rkey, r.cid, r.record, r.time_us'
    + ` FROM records_${shortOf(nsid)} r JOIN feed_items f ON r.uri = f.uri WHERE f.actor = ?`;
  const tail = ' ORDER BY r.time_us DESC, r.uri ASC LIMIT ?';
  return {
    first: db.prepare(base + tail),
    next: db.prepare(base + ' AND (r.time_us < ? OR (r.time_us = ? AND r.uri > ?))' + tail),
  };
}

function page(queries, nsid, actor, limit, cursor) {
  let rows;
  if (cursor) {
    const { t, u } = decodeCursor(cursor);
    rows = queries.next.all(actor, t, t, u, limit);
  } else {
    rows = queries.first.all(actor, limit);
  }
  const records = rows.map((r) => ({
    uri: r.uri, cid: r.cid, value: JSON.parse(r.record), did: r.did, collection: nsid, rkey: r.rkey,
    time_us: r.time_us,
  }));
  const body = { records };
  if (records.length === limit) {
    const last = records[records.length - 1];
    body.cursor = encodeCursor(last.time_us, last.uri);
  }
  return body;
}

const JSON_HEADERS = { 'content-type': 'application/json; charset=utf-8' };

// The route a Contrail app answers getFeed with: parse the query, read the page, answer JSON.
function answer(queries, nsid, namespace, url) {
  if (url.pathname !== `/xrpc/${namespace}.getFeed`) return [404, { error: 'NotFound', message: 'no such method' }];
  const actor = url.searchParams.get('actor');
  if (!actor) return [400, { error: 'InvalidRequest', message: 'actor parameter required' }];
  const limit = Math.min(Math.max(Number.parseInt(url.searchParams.get('limit') ?? '50', 10) || 50, 1), 100);
  return [200, page(queries, nsid, actor, limit, url.searchParams.get('cursor') || undefined)];
}

async function handle(queries, nsid, namespace, request) {
  const [status, body] = answer(queries, nsid, namespace, new URL(request.url));
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

async function serve(path, nsid, port, namespace = 'com.featherreader') {
  const { createServer } = await import('node:http');
  const db = open(path);
  const queries = pageQueries(db, nsid);
  const server = createServer((req, res) => {
    let status;
    let text;
    try {
      const [code, body] = answer(queries, nsid, namespace, new URL(req.url, 'http://127.0.0.1'));
      status = code;
      text = JSON.stringify(body);
    } catch (err) {
      status = 500;
      text = JSON.stringify({ error: 'InternalServerError', message: String(err) });
    }
    res.writeHead(status, { ...JSON_HEADERS, 'content-length': Buffer.byteLength(text) });
    res.end(text);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  process.stdout.write(JSON.stringify({ listening: port }) + '\n');
  await new Promise((resolve) => process.on('SIGTERM', resolve));
  server.close();
  db.close();
  return null;
}

function getfeed(path, nsid, actor, limit = 50, cursor = undefined) {
  const db = open(path);
  const body = page(pageQueries(db, nsid), nsid, actor, limit, cursor);
  db.close();
  return body;
}

async function getfeedRounds(path, nsid, limit = 50) {
  const db = open(path);
  const queries = pageQueries(db, nsid);
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const seconds = [];
    const pages = [];
    const requestSeconds = [];
    const requestPages = [];
    for (const actor of JSON.parse(line)) {
      let started = performance.now();
      const body = page(queries, nsid, actor, limit);
      seconds.push((performance.now() - started) / 1000);
      pages.push(body.records.map((r) => r.uri));
      const url = `http://127.0.0.1/xrpc/com.featherreader.getFeed?feed=timeline&actor=${encodeURIComponent(actor)}`
        + `&limit=${limit}`;
      started = performance.now();
      const response = await handle(queries, nsid, 'com.featherreader', new Request(url));
      const text = await response.text();
      requestSeconds.push((performance.now() - started) / 1000);
      requestPages.push(JSON.parse(text).records.map((r) => r.uri));
    }
    process.stdout.write(JSON.stringify({
      seconds, pages, request_seconds: requestSeconds, request_pages: requestPages,
    }) + '\n');
  }
  db.close();
  return null;
}

async function main(argv) {
  const [mode, ...args] = argv;
  const int = (s, dflt) => (s === undefined || s === '' ? dflt : Number.parseInt(s, 10));
  switch (mode) {
    case 'schema': return schema(args[0], args.slice(1));
    case 'fanout': return fanout(args[0], args[1], args[2], args[3], int(args[4]), args[5]);
    case 'getfeed': return getfeed(args[0], args[1], args[2], int(args[3], 50), args[4] || undefined);
    case 'getfeed-rounds': return getfeedRounds(args[0], args[1], int(args[2], 50));
    case 'serve': return serve(args[0], args[1], int(args[2]), args[3] || undefined);
    default: throw new Error(`unknown mode ${mode}; see the header of shape.mjs`);
  }
}

const result = await main(process.argv.slice(2));
if (result !== null) process.stdout.write(JSON.stringify(result) + '\n');
