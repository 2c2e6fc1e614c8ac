// SPDX-License-Identifier: ISC
// Every page of CoreScope's front end, once against CoreScope's own server and once through
// meshgate, in front of it (MESHGATE_UPSTREAM) or alone on the same database, in headless
// Chromium; a table of what each side showed, and exit 1 when a page is worse through
// meshgate than direct.
//
//   NODE_PATH=build/npm/node_modules [NODE_KEYS=KEY,...] [ONLY=REGEX] node tools/browser-compare.js DIRECT_URL MESHGATE_URL
//
// Both servers must serve the same database (meshgate's MESHGATE_DB and the upstream's -db)
// and the same front end (MESHGATE_PUBLIC_DIR and the upstream's -public). For each page and
// side it records:
//   console  console errors and uncaught page errors;
//   api>=400 /api/ responses with a status of 400 or more, and /api/ requests that failed;
//   ws       WebSockets that failed or closed while the page was open;
//   errtext  an error message shown in the page ("Error:", "Failed to load", "API 500");
//   items    the page's main items: table rows, map markers and paths, list items, charts,
//            Audio Lab's packets.
// A page is worse through meshgate when any of the first four is higher, or it shows fewer
// items (but the Perf page, whose rows are each server's own statistics); such a page is visited once more on both sides, meshgate first, and judged on that second visit (the
// table says what the first showed). A page counts as settled once no /api/ request has been in flight for SETTLE_MS
// (default 2000), at most PAGE_WAIT_MS (default 45000) after it loaded. Exit 0: no page
// worse; 1: some page worse (named); 64: bad usage; 77: playwright-core or chromium missing.
// CDN files come from the npm copy and other outside hosts are aborted (tests/browser/hook.js).
'use strict';
const fs = require('fs');
const path = require('path');

const [DIRECT, MESHGATE] = process.argv.slice(2);
if (!DIRECT || !MESHGATE) {
  console.error('usage: browser-compare.js DIRECT_URL MESHGATE_URL');
  process.exit(64);
}
try {
  require.resolve('playwright-core');
} catch (e) {
  console.log('browser-compare skipped: the npm package playwright-core is missing (make check-deps; NODE_PATH=build/npm/node_modules)');
  process.exit(77);
}
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) {
  console.log(`browser-compare skipped: ${CHROMIUM} is missing (Debian package chromium)`);
  process.exit(77);
}
require(path.join(__dirname, '..', 'tests', 'browser', 'hook.js'));
const { chromium } = require('playwright');

const SETTLE_MS = Number(process.env.SETTLE_MS || 2000);
const WAIT_MS = Number(process.env.PAGE_WAIT_MS || 45000);
const ERROR_TEXT = /(^|\s)(Error:|Error loading|Failed to load)|API \d{3}/;
const ITEMS = [
  '#app tbody tr',
  '#app .leaflet-marker-icon',
  '#app path.leaflet-interactive',
  '#app canvas',
  '#app .ch-item',
  '#app .suggest-item',
  '#app svg circle',
  '#app .alab-pkt',
  'body > .area-row, #area-list > *',
].join(', ');

const ANALYTICS_TABS = ['overview', 'rf', 'topology', 'channels', 'hashsizes', 'collisions',
  'subpaths', 'nodes', 'my-repeaters', 'distance', 'neighbor-graph', 'rf-health', 'clock-health',
  'roles', 'scopes', 'prefix-tool'];

// Every route of public/app.js's router (and the standalone pages), with real keys from the
// database as CoreScope's own server answers them.
async function pageList() {
  const get = async (p) => {
    const r = await fetch(DIRECT + p);
    if (!r.ok) throw new Error(`GET ${DIRECT}${p} answered ${r.status} (needed to choose what to open)`);
    return r.json();
  };
  const { packets } = await get('/api/packets?limit=1');
  const { nodes } = await get('/api/nodes?limit=1&role=repeater&sortBy=packetCount');
  // The node page of the busiest companion and room server too (their detail differs by
  // role), and of the keys NODE_KEYS names (comma-separated: a hidden node, say).
  const more = [];
  for (const role of ['companion', 'room']) {
    const r = (await get(`/api/nodes?limit=200&role=${role}&sortBy=packetCount`)).nodes;
    if (r.length) more.push([`node detail (${role})`, `/#/nodes/${r[0].public_key}`]);
  }
  for (const k of (process.env.NODE_KEYS || '').split(',').filter(Boolean))
    more.push([`node detail (${k.slice(0, 8)})`, `/#/nodes/${k}`]);
  const observers = (await get('/api/observers')).observers;
  const hash = packets[0].hash;
  const pk = nodes[0].public_key;
  const [a, b] = observers.map((o) => o.id);
  const list = [
    ['home', '/#/home'],
    ['packets', '/#/packets'],
    ['packets (one selected)', `/#/packets/${hash}`],
    ['packet detail', `/#/packet/${hash}`],
    ['map', '/#/map'],
    ['live', '/#/live'],
    ['nodes', '/#/nodes'],
    ['node detail', `/#/nodes/${pk}`],
    ...more,
    ['node analytics', `/#/nodes/${pk}/analytics`],
    ['node reach', `/#/nodes/${pk}/reach`],
    ['channels', '/#/channels'],
    ['observers', '/#/observers'],
    ['observer detail', `/#/observers/${encodeURIComponent(a)}`],
    ['compare', `/#/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`],
    ['tools', '/#/tools'],
    ['trace', `/#/tools/trace/${hash}`],
    ['path inspector', '/#/tools/path-inspector'],
    ['rx coverage', '/#/rx-coverage'],
    // Its rows are each server's own request statistics: their number is not compared.
    ['perf', '/#/perf', { items: false }],
    ['audio lab', '/#/audio-lab'],
  ];
  for (const t of ANALYTICS_TABS) list.push([`analytics: ${t}`, `/#/analytics?tab=${t}`]);
  list.push(['area map', '/area-map.html'], ['geofilter builder', '/geofilter-builder.html'],
    ['geofilter docs', '/geofilter-docs.html']);
  return list;
}

async function visit(browser, base, target) {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await context.newPage();
  const seen = { console: [], api: [], ws: [], errtext: '', items: 0 };
  let inflight = 0;
  let quietSince = Date.now();
  const isApi = (req) => new URL(req.url()).pathname.startsWith('/api/');
  const settleOne = (req) => {
    if (isApi(req) && --inflight === 0) quietSince = Date.now();
  };
  // An outside host's file (a map tile) is aborted on purpose on both sides: not an error.
  const outside = (m) => {
    const u = (m.location() && m.location().url) || '';
    return /^https?:/.test(u) && new URL(u).hostname !== new URL(base).hostname;
  };
  page.on('console', (m) => { if (m.type() === 'error' && !outside(m)) seen.console.push(m.text()); });
  page.on('pageerror', (e) => seen.console.push(String(e).split('\n')[0]));
  page.on('request', (req) => { if (isApi(req)) inflight++; });
  page.on('requestfinished', settleOne);
  page.on('requestfailed', (req) => {
    if (isApi(req)) seen.api.push(`failed ${new URL(req.url()).pathname} (${req.failure().errorText})`);
    settleOne(req);
  });
  page.on('response', (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith('/api/') && r.status() >= 400) seen.api.push(`${r.status()} ${u.pathname}${u.search}`);
  });
  page.on('websocket', (ws) => {
    ws.on('socketerror', (e) => seen.ws.push(`${ws.url()}: ${e}`));
    ws.on('close', () => { if (!page.isClosed()) seen.ws.push(`${ws.url()}: closed`); });
  });
  try {
    await page.goto(base + target, { waitUntil: 'load', timeout: WAIT_MS });
    const until = Date.now() + WAIT_MS;
    while (Date.now() < until && (inflight > 0 || Date.now() - quietSince < SETTLE_MS))
      await page.waitForTimeout(100);
    const text = await page.locator('body').innerText();
    const shown = ERROR_TEXT.exec(text);
    if (shown) {
      const at = text.indexOf(shown[0]);
      seen.errtext = text.slice(Math.max(0, at - 30), at + 90).replace(/\s+/g, ' ').trim();
    }
    seen.items = await page.locator(ITEMS).count();
  } catch (e) {
    seen.console.push(`(visit) ${e.message.split('\n')[0]}`);
  }
  await context.close();
  return seen;
}

function worse(d, m, compareItems) {
  const why = [];
  if (m.console.length > d.console.length) why.push('console errors');
  if (m.api.length > d.api.length) why.push('failed /api/ requests');
  if (m.ws.length > d.ws.length) why.push('WebSocket errors');
  if (m.errtext && !d.errtext) why.push('error text');
  if (compareItems && m.items < d.items) why.push('fewer items');
  return why;
}

(async () => {
  // ONLY (a regular expression) keeps the pages whose names it matches.
  const pages = (await pageList()).filter(([name]) => new RegExp(process.env.ONLY || '').test(name));
  const browser = await chromium.launch();
  const rows = [];
  for (const [name, target, opts = {}] of pages) {
    const compareItems = opts.items !== false;
    let d = await visit(browser, DIRECT, target);
    let m = await visit(browser, MESHGATE, target);
    let why = worse(d, m, compareItems);
    let note = '';
    // A first visit may meet a cold cache on either side (CoreScope's analytics answer
    // "computing" at first): a page worse through meshgate is visited once more, both sides,
    // meshgate first this time (a page that lists the last minutes' packets shows fewer on
    // the side visited later as rows age out of its window).
    if (why.length) {
      note = ` (first visit: ${why.join(', ')})`;
      m = await visit(browser, MESHGATE, target);
      d = await visit(browser, DIRECT, target);
      why = worse(d, m, compareItems);
    }
    rows.push({ name, target, d, m, why, note });
    process.stderr.write(`${name}: direct ${d.items} items, meshgate ${m.items}${why.length ? ' WORSE' : ''}${note}\n`);
  }
  await browser.close();
  const cell = (s) => `${s.console.length} / ${s.api.length} / ${s.ws.length} / ${s.errtext ? 'yes' : 'no'} / ${s.items}`;
  console.log('| page | direct: console / api>=400 / ws / errtext / items | meshgate: the same | verdict |');
  console.log('|---|---|---|---|');
  for (const r of rows)
    console.log(`| ${r.name} | ${cell(r.d)} | ${cell(r.m)} | ${r.why.length ? 'WORSE: ' + r.why.join(', ') : 'same or better'}${r.note} |`);
  const bad = rows.filter((r) => r.why.length);
  for (const r of rows) {
    const detail = (label, s) => [...s.console.map((x) => `console: ${x}`), ...s.api.map((x) => `api: ${x}`),
      ...s.ws.map((x) => `ws: ${x}`), ...(s.errtext ? [`errtext: ${s.errtext}`] : [])].map((x) => `  ${label} ${x}`);
    const lines = [...detail('direct', r.d), ...detail('meshgate', r.m)];
    if (lines.length) console.log(`\n${r.name} (${r.target}):\n${[...new Set(lines)].join('\n')}`);
  }
  console.log(`\n${rows.length} pages, ${bad.length} worse through meshgate${bad.length ? ': ' + bad.map((r) => r.name).join(', ') : ''}`);
  process.exit(bad.length ? 1 : 0);
})().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(2);
});
