// SPDX-License-Identifier: ISC
// The browser check of the proxy (issue 15): CoreScope's front end, served by meshgate in front
// of the test upstream, in headless Chromium. The Perf page's Write Sources table reads
// /api/perf/write-sources, which meshgate passes up (MESHGATE_UPSTREAM_PREFER in the test): it
// must show the upstream's source; and the live WebSocket every page opens must connect through
// meshgate's tunnel.
//
//   node tests/upstream/browser-check.js BASE_URL
//
// Exit 0: passed; 1: failed (with why); 77: skipped (playwright-core or chromium missing),
// with a line saying so. playwright-core is found through NODE_PATH (the test passes
// BUILD/npm/node_modules); CHROMIUM names the browser (default /usr/bin/chromium).
'use strict';
const fs = require('fs');

const base = process.argv[2];
if (!base) {
  console.error('usage: browser-check.js BASE_URL');
  process.exit(64);
}
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (e) {
  console.log('browser check skipped: the npm package playwright-core is missing');
  process.exit(77);
}
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(executablePath)) {
  console.log(`browser check skipped: ${executablePath} is missing (Debian package chromium)`);
  process.exit(77);
}

function fail(why) {
  console.error(`browser check FAILED: ${why}`);
  process.exitCode = 1;
}

(async () => {
  const browser = await chromium.launch({ executablePath, headless: true, args: ['--no-sandbox'] });
  try {
    const context = await browser.newContext();
    // No machine here reaches a CDN or map tiles: nothing this check needs comes from there.
    await context.route(/^https?:\/\/(?!127\.0\.0\.1)/, (route) => route.abort());
    const page = await context.newPage();
    const sockets = [];
    page.on('websocket', (ws) => {
      const entry = { url: ws.url(), error: null, closed: false };
      ws.on('socketerror', (err) => { entry.error = String(err); });
      ws.on('close', () => { entry.closed = true; });
      sockets.push(entry);
    });
    const errors = [];
    page.on('pageerror', (err) => errors.push(String(err)));
    await page.goto(`${base}/#/perf`, { waitUntil: 'domcontentloaded', timeout: 60000 });
    const source = 'table.perf-table code';
    await page.waitForFunction(
      (sel) => [...document.querySelectorAll(sel)].some((e) => e.textContent === 'served_by_the_test_upstream'),
      source, { timeout: 60000 });
    const name = 'served_by_the_test_upstream';
    // The live socket: opened on the page's own host, and still open after a while.
    const deadline = Date.now() + 30000;
    while (sockets.length === 0 && Date.now() < deadline)
      await page.waitForTimeout(100);
    await page.waitForTimeout(1500);
    const open = sockets.filter((s) => !s.error && !s.closed);
    if (sockets.length === 0)
      fail('the page opened no WebSocket');
    else if (open.length === 0)
      fail(`no WebSocket stayed open: ${JSON.stringify(sockets)}`);
    else if (!open[0].url.startsWith(base.replace(/^http/, 'ws')))
      fail(`the WebSocket went to ${open[0].url}, not through meshgate`);
    // meshgate counts the tunnel (loopback is an admin network).
    const metrics = await (await fetch(`${base}/metrics`)).text();
    const m = metrics.match(/^meshgate_upstream_tunnels_open (\d+)$/m);
    if (!m || Number(m[1]) < 1)
      fail(`meshgate shows no open tunnel (${m ? m[0] : 'no meshgate_upstream_tunnels_open'})`);
    if (process.exitCode !== 1)
      console.log(`browser check passed: "${name.trim()}" from the upstream; WebSocket ${open[0].url} open`);
  } finally {
    await browser.close();
  }
})().catch((e) => { fail(e.stack || String(e)); });
