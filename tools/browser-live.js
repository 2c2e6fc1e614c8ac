// SPDX-License-Identifier: ISC
// The Live page with a writer: CoreScope's front end's /#/live open in headless Chromium on
// two servers of the same database at once (CoreScope's own and meshgate alone, or any two),
// while a writer appends transmissions and their observations to the file as CoreScope's
// ingestor does (tools/soak-live.py append); each new packet must appear in each side's live
// feed (an item with its hash), carried by the page's WebSocket.
//
//   NODE_PATH=build/npm/node_modules node tools/browser-live.js DIRECT_URL MESHGATE_URL DB [N]
//
// N transmissions (default 5) are written LIVE_GAP_S (default 2) seconds apart once both
// pages have their WebSocket open and have settled; each side then has LIVE_WAIT_MS (default
// 60000) to show them. The table gives, for each side: the feed's items before and after, the
// WebSocket's "packet" messages, how many of the new hashes its feed shows, and console errors.
// Exit 0: meshgate shows every new packet and no more console errors than the direct side;
// 1: it does not (named); 64: bad usage; 77: playwright-core or chromium missing.
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const [DIRECT, MESHGATE, DB, N = '5'] = process.argv.slice(2);
if (!DIRECT || !MESHGATE || !DB || !(Number(N) > 0)) {
  console.error('usage: browser-live.js DIRECT_URL MESHGATE_URL DB [N]');
  process.exit(64);
}
try {
  require.resolve('playwright-core');
} catch (e) {
  console.log('browser-live skipped: the npm package playwright-core is missing (make npm-deps; NODE_PATH=build/npm/node_modules)');
  process.exit(77);
}
const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) {
  console.log(`browser-live skipped: ${CHROMIUM} is missing (Debian package chromium)`);
  process.exit(77);
}
require(path.join(__dirname, '..', 'tests', 'browser', 'hook.js'));
const { chromium } = require('playwright');

const WAIT_MS = Number(process.env.LIVE_WAIT_MS || 60000);
const GAP_S = Number(process.env.LIVE_GAP_S || 2);
const FEED = '#liveFeed .live-feed-item';

async function open(browser, base) {
  const context = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await context.newPage();
  const side = { base, context, page, console: [], ws: [], packets: 0, open: false, before: 0 };
  page.on('console', (m) => {
    const u = (m.location() && m.location().url) || '';
    const outside = /^https?:/.test(u) && new URL(u).hostname !== new URL(base).hostname;
    if (m.type() === 'error' && !outside) side.console.push(m.text());
  });
  page.on('pageerror', (e) => side.console.push(String(e).split('\n')[0]));
  page.on('websocket', (ws) => {
    side.open = true;
    ws.on('framereceived', (f) => {
      try {
        if (JSON.parse(f.payload).type === 'packet') side.packets++;
      } catch (e) { /* not JSON: a ping's payload */ }
    });
    ws.on('socketerror', (e) => side.ws.push(`${ws.url()}: ${e}`));
    ws.on('close', () => { if (!page.isClosed()) side.ws.push(`${ws.url()}: closed`); });
  });
  await page.goto(base + '/#/live', { waitUntil: 'load', timeout: WAIT_MS });
  const until = Date.now() + WAIT_MS;
  while (!side.open && Date.now() < until) await page.waitForTimeout(100);
  if (!side.open) side.ws.push('no WebSocket opened');
  return side;
}

// The hashes of the feed's items (the page sets data-hash on the items it adds).
const shown = (side) => side.page.$$eval(FEED, (els) => els.map((e) => e.getAttribute('data-hash')));

(async () => {
  const browser = await chromium.launch();
  const sides = [await open(browser, DIRECT), await open(browser, MESHGATE)];
  // The page replays recent packets at first: let both feeds settle before counting.
  for (const s of sides) {
    let last = -1;
    const until = Date.now() + WAIT_MS;
    while (Date.now() < until) {
      await s.page.waitForTimeout(3000);
      const n = (await shown(s)).length;
      if (n === last) break;
      last = n;
    }
    s.before = (await shown(s)).length;
    s.packetsBefore = s.packets;
  }
  const out = execFileSync('python3', [path.join(__dirname, 'soak-live.py'), 'append', DB, N, String(GAP_S)],
    { encoding: 'utf8' });
  const hashes = JSON.parse(out.trim().split('\n').pop());
  process.stderr.write(`wrote ${hashes.length} transmissions: ${hashes.join(' ')}\n`);
  for (const s of sides) {
    const until = Date.now() + WAIT_MS;
    for (;;) {
      const have = new Set(await shown(s));
      s.found = hashes.filter((h) => have.has(h));
      if (s.found.length === hashes.length || Date.now() > until) break;
      await s.page.waitForTimeout(500);
    }
    s.after = (await shown(s)).length;
    s.missing = hashes.filter((h) => !s.found.includes(h));
  }
  await browser.close();
  const [d, m] = sides;
  const cell = (s) => `${s.before} / ${s.after} / ${s.packets - s.packetsBefore} / ${s.found.length} of ${hashes.length} / ${s.console.length} / ${s.ws.length}`;
  console.log('| page | direct: feed before / after / ws packets / new hashes shown / console / ws errors | meshgate: the same | verdict |');
  console.log('|---|---|---|---|');
  const why = [];
  if (m.missing.length) why.push(`meshgate's feed lacks ${m.missing.join(', ')}`);
  if (m.console.length > d.console.length) why.push('console errors');
  if (m.ws.length > d.ws.length) why.push('WebSocket errors');
  console.log(`| live, ${hashes.length} written | ${cell(d)} | ${cell(m)} | ${why.length ? 'WORSE: ' + why.join('; ') : 'same or better'} |`);
  for (const [label, s] of [['direct', d], ['meshgate', m]]) {
    for (const x of s.console) console.log(`  ${label} console: ${x}`);
    for (const x of s.ws) console.log(`  ${label} ws: ${x}`);
    if (s.missing.length) console.log(`  ${label} missing: ${s.missing.join(' ')}`);
  }
  process.exit(why.length ? 1 : 0);
})().catch((e) => {
  console.error(e.stack || String(e));
  process.exit(2);
});
